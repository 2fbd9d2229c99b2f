"""Suite-wide settings: compiled code goes to a per-session cache, never the user's."""
from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TENSORPLAY_CACHE_DIR", tempfile.mkdtemp(prefix="tensorplay-test-cache-"))
