"""REST API v1 routes of the quotas app (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from quotas.api.fairness import QuotaBudgetViewSet, QuotaLoanViewSet
from quotas.api.notice_board import ReclaimNoticeBoardViewSet
from quotas.api.views import QuotaGroupViewSet, QuotaViewSet

router = SimpleRouter()
router.register("quota-groups", QuotaGroupViewSet, basename="quota-group")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("quota-loans", QuotaLoanViewSet, basename="quota-loan")
router.register("quota-budgets", QuotaBudgetViewSet, basename="quota-budget")
router.register("reclaim-notices", ReclaimNoticeBoardViewSet, basename="reclaim-notice")
urlpatterns = router.urls
