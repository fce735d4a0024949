"""REST API v1 routes of the scheduling app (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

router = SimpleRouter()
urlpatterns = router.urls
