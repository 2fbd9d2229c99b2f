"""Helpers for the archive tests: a hand-built program and tools that damage archives."""
