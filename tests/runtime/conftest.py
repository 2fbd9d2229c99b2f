"""Every runtime test gets its own compile-cache directory, never the user's ~/.cache."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLAY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TENSORPLAY_CACHE", raising=False)
    monkeypatch.delenv("TENSORPLAY_VECTOR_WIDTH", raising=False)
