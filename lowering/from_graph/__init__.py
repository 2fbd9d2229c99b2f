"""Exported programs and traced graphs to the ``tp`` dialect."""
