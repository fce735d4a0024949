"""REST API v1 routes for usage time series (mounted at /api/v1/)."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from scheduling.telemetry.api import views

router = SimpleRouter()
router.register("usage/tenants", views.TenantUsageViewSet, basename="usage-tenant")
router.register("usage/quotas", views.QuotaUsageViewSet, basename="usage-quota")
router.register("usage/pools", views.PoolUsageViewSet, basename="usage-pool")
urlpatterns = [
    path("usage/bill/", views.BillView.as_view(), name="usage-bill"),
    path("usage/bill.csv", views.BillCsvView.as_view(), name="usage-bill-csv"),
    *router.urls,
]
