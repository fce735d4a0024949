"""REST API v1 routes of the quotas app (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from quotas.api.views import QuotaGroupViewSet, QuotaViewSet

router = SimpleRouter()
router.register("quota-groups", QuotaGroupViewSet, basename="quota-group")
router.register("quotas", QuotaViewSet, basename="quota")
urlpatterns = router.urls
