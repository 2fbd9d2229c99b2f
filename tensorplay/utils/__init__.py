"""Utilities: :mod:`tensorplay.utils.data` (datasets and loaders)."""
