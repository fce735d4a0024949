"""Portal API routes: tenants, tokens, me (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from portal.api.views import ApiTokenViewSet, MeViewSet, OperatorActionViewSet, TenantViewSet

router = SimpleRouter()
router.register("tenants", TenantViewSet, basename="tenant")
router.register("tokens", ApiTokenViewSet, basename="token")
router.register("me", MeViewSet, basename="me")
router.register("operator-actions", OperatorActionViewSet, basename="operator-action")
urlpatterns = router.urls
