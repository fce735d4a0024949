"""Fixtures of the scheduling app (registered in the root conftest.py)."""
