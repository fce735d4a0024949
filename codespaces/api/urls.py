"""REST API v1 routes of the codespaces app (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from codespaces.api.views import CodespaceTemplateViewSet, CodespaceViewSet

router = SimpleRouter()
router.register("codespaces", CodespaceViewSet, basename="codespace")
router.register("templates", CodespaceTemplateViewSet, basename="codespace-template")
urlpatterns = router.urls
