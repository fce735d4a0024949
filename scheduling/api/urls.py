"""REST API v1 routes of the scheduling app (mounted at /api/v1/)."""

from rest_framework.routers import SimpleRouter

from scheduling.api.defrag import DefragPlanViewSet
from scheduling.api.demand import DemandViewSet
from scheduling.api.views import (
    GpuViewSet,
    JobViewSet,
    MigReconfigurationViewSet,
    NodeViewSet,
    PlacementViewSet,
    WorkloadViewSet,
)
from scheduling.api.whatif import WhatIfViewSet

router = SimpleRouter()
router.register("nodes", NodeViewSet, basename="node")
router.register("gpus", GpuViewSet, basename="gpu")
router.register("placements", PlacementViewSet, basename="placement")
router.register("mig-reconfigurations", MigReconfigurationViewSet, basename="mig-reconfiguration")
router.register("workloads", WorkloadViewSet, basename="workload")
router.register("jobs", JobViewSet, basename="job")
router.register("demand", DemandViewSet, basename="demand")
router.register("what-if", WhatIfViewSet, basename="what-if")
router.register("defrag/plans", DefragPlanViewSet, basename="defrag-plan")
urlpatterns = router.urls
