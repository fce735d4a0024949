"""The Prometheus /metrics endpoint (mounted at the site root)."""

urlpatterns: list = []
