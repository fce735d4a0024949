"""Fixtures of the telemetry app (registered in the root conftest.py)."""
