"""Capture models as exported programs (tensorplay.export)."""
