"""Fixtures of the quotas app (registered in the root conftest.py)."""
