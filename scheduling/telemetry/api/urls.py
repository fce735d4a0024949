"""REST API v1 routes for usage time series (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from scheduling.telemetry.api import views

router = SimpleRouter()
router.register("usage/tenants", views.TenantUsageViewSet, basename="usage-tenant")
router.register("usage/quotas", views.QuotaUsageViewSet, basename="usage-quota")
router.register("usage/pools", views.PoolUsageViewSet, basename="usage-pool")
urlpatterns = router.urls
