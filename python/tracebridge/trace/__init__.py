"""Tracing: run the user's code once and record it (tracer pieces, capture)."""
