"""The Prometheus /metrics endpoint (mounted at the site root)."""

from django.urls import path

from dashboards import metrics

urlpatterns = [path("metrics", metrics.metrics_view, name="metrics")]
