"""Pages of the codespaces app."""

from django.urls import path  # noqa: F401

app_name = "codespaces"
urlpatterns: list = []
