"""Fixtures of the codespaces app (registered in the root conftest.py)."""
