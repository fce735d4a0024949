from django.apps import AppConfig

from quotas.cluster import install


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling and inventory"

    def ready(self) -> None:
        # quotas sits below scheduling: it counts nodes and workloads through the rows installed here.
        from scheduling.quota_rows import SchedulingRows

        install(SchedulingRows())
