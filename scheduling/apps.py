from django.apps import AppConfig

from quotas.cluster import install as install_cluster_rows
from scheduling.followups import install as install_followups


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling and inventory"

    def ready(self) -> None:
        # The models exist only now. quotas sits below scheduling: it counts nodes and workloads through
        # the rows installed here; services queue follow-up work through the tasks installed here.
        from scheduling.quota_rows import SchedulingRows
        from scheduling.tasks import TaskFollowUps

        install_cluster_rows(SchedulingRows())
        install_followups(TaskFollowUps())
