"""Pages of the quotas app."""

from django.urls import path  # noqa: F401

app_name = "quotas"
urlpatterns: list = []
