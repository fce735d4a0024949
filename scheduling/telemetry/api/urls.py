"""REST API v1 routes for usage time series (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

router = SimpleRouter()
urlpatterns = router.urls
