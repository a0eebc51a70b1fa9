"""Checks: that a recording matches the real code (``verify``: check_trace)."""
