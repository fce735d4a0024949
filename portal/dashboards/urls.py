"""Dashboard pages (mounted at /dashboards/)."""

from django.urls import path  # noqa: F401

app_name = "dashboards"
urlpatterns: list = []
