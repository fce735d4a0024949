"""Usage samples: per workload and per GPU every minute (kept 48 h), and per quota and per pool at two
resolutions (a row per minute kept 48 h, a row per hour kept 400 days).

Quota and pool rows hold **sums over the minutes they cover** (`minutes` says how many), so a minute row
and an hour row are read the same way: mean over the period = field / minutes, GPU-hours = milli field
/ 1000 / 60. Rolling minutes up into an hour is then a plain SUM, and any range of hours sums again.
"""

from __future__ import annotations

from django.db import models

from portal.models import Tenant
from quotas.models import Quota, QuotaGroup
from scheduling.models import Gpu, Workload


class Resolution(models.TextChoices):
    MINUTE = "minute", "Minute"
    HOUR = "hour", "Hour"


class Source(models.TextChoices):
    SIMULATED = "simulated", "Simulated backend (synthetic)"
    PROMETHEUS = "prometheus", "Prometheus (DCGM + HAMi)"


class Attribution(models.TextChoices):
    """How a workload's share of a GPU's use was found (shown next to the figure)."""

    CONTAINER = "container", "measured per container (HAMi)"
    DEVICE = "device", "the device's own figure (the only workload on its GPUs)"
    APPORTIONED = "apportioned", "apportioned: the device's use split by allocation"
    SIMULATED = "simulated", "simulated"


class WorkloadSample(models.Model):
    """One minute of one GPU workload: what it held and how much of it it used.

    `sm_utilization` is the SM activity of the workload as a percentage **of its own allocation** (a 25 %
    slice fully busy is 100); `used_milli` = allocated_milli × sm_utilization / 100. Null utilization means
    no metric arrived for that minute (the allocation still counts)."""

    ts = models.DateTimeField(help_text="Start of the minute (UTC)")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="samples")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20)
    allocated_milli = models.PositiveIntegerField()
    sm_utilization = models.FloatField(null=True, blank=True)
    used_milli = models.FloatField(default=0)
    memory_used_mib = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.SIMULATED)
    attribution = models.CharField(
        max_length=20,
        choices=Attribution.choices,
        blank=True,
        help_text="How the workload's share of a shared GPU was found (blank: no metric)",
    )

    class Meta:
        ordering = ["-ts"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "ts"], name="uniq_workload_sample_minute")
        ]
        indexes = [
            models.Index(fields=["ts"], name="wsample_ts"),
            models.Index(fields=["tenant", "kind", "ts"], name="wsample_tenant_kind_ts"),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}@{self.ts:%Y-%m-%d %H:%M}"


class WorkloadHourly(models.Model):
    """One hour of one GPU workload, rolled up from its minute samples (kept 400 days).

    Sums over `minutes`: `allocated_milli_minutes`, `used_milli_minutes`, and `idle_milli_minutes` (the
    allocation of minutes whose utilization was below the idle threshold)."""

    hour = models.DateTimeField()
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="hourly")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20)
    minutes = models.PositiveIntegerField()
    allocated_milli_minutes = models.FloatField()
    used_milli_minutes = models.FloatField()
    idle_milli_minutes = models.FloatField()

    class Meta:
        ordering = ["-hour"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "hour"], name="uniq_workload_hourly")
        ]
        indexes = [models.Index(fields=["tenant", "kind", "hour"], name="whourly_tenant_kind_hour")]

    def __str__(self) -> str:
        return f"{self.workload_id}@{self.hour:%Y-%m-%d %H}h"


class GpuSample(models.Model):
    """One minute of one physical GPU (device metrics: DCGM on real clusters, synthetic when simulated)."""

    ts = models.DateTimeField()
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="samples")
    sm_utilization = models.FloatField(help_text="Percent of the whole card")
    memory_used_mib = models.PositiveIntegerField()
    allocated_milli = models.PositiveIntegerField()
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.SIMULATED)

    class Meta:
        ordering = ["-ts"]
        constraints = [models.UniqueConstraint(fields=["gpu", "ts"], name="uniq_gpu_sample_minute")]
        indexes = [models.Index(fields=["ts"], name="gsample_ts")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id}@{self.ts:%Y-%m-%d %H:%M}"


class QuotaSample(models.Model):
    """Per quota and GPU model, over `minutes` minutes starting at `ts`: sums of allocated, used and idle
    GPU milli, of the quota's min / max / runtime share / borrowed GPU milli (quotas.usage) and of the
    count of pending GPU workloads."""

    resolution = models.CharField(max_length=10, choices=Resolution.choices)
    ts = models.DateTimeField()
    minutes = models.PositiveIntegerField(default=1)
    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="+")
    quota = models.ForeignKey(Quota, on_delete=models.CASCADE, related_name="samples")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    gpu_model = models.CharField(max_length=63, blank=True)
    allocated_milli = models.FloatField(default=0)
    used_milli = models.FloatField(default=0)
    idle_milli = models.FloatField(default=0)
    min_milli = models.FloatField(default=0)
    max_milli = models.FloatField(default=0)
    runtime_milli = models.FloatField(default=0)
    borrowed_milli = models.FloatField(default=0)
    pending = models.FloatField(default=0)

    class Meta:
        ordering = ["-ts"]
        constraints = [
            models.UniqueConstraint(
                fields=["resolution", "quota", "gpu_model", "ts"], name="uniq_quota_sample"
            )
        ]
        indexes = [
            models.Index(fields=["resolution", "tenant", "ts"], name="qsample_res_tenant_ts"),
            models.Index(fields=["resolution", "ts"], name="qsample_res_ts"),
        ]

    def __str__(self) -> str:
        return f"{self.quota_id} {self.resolution}@{self.ts:%Y-%m-%d %H:%M}"


class PoolSample(models.Model):
    """Per pool (quota group), over `minutes` minutes starting at `ts`: sums of schedulable capacity
    (healthy GPUs), allocation (milli and occupied cards), mean SM utilization of its healthy GPUs,
    pending GPU workloads and the codespace slicing figures; wait percentiles (seconds, submit → placed)
    of the workloads placed in the hour before `ts` + minutes (not summed: recomputed per row)."""

    resolution = models.CharField(max_length=10, choices=Resolution.choices)
    ts = models.DateTimeField()
    minutes = models.PositiveIntegerField(default=1)
    group = models.ForeignKey(QuotaGroup, on_delete=models.CASCADE, related_name="+")
    capacity_gpus = models.FloatField(default=0)
    capacity_milli = models.FloatField(default=0)
    allocated_gpus = models.FloatField(default=0)
    allocated_milli = models.FloatField(default=0)
    sm_utilization = models.FloatField(default=0, help_text="Sum over minutes of the mean SM %")
    pending = models.FloatField(default=0)
    codespace_cards_unsliced = models.FloatField(
        default=0, help_text="Whole cards the codespaces would hold without slicing"
    )
    codespace_cards_occupied = models.FloatField(
        default=0, help_text="Cards that hold at least one codespace slice"
    )
    wait_p50_seconds = models.FloatField(null=True, blank=True)
    wait_p95_seconds = models.FloatField(null=True, blank=True)
    placed_count = models.PositiveIntegerField(default=0)
    cycle_ms = models.FloatField(
        null=True, blank=True, help_text="Latency of the pool's last scheduling cycle (minute rows)"
    )

    class Meta:
        ordering = ["-ts"]
        constraints = [
            models.UniqueConstraint(fields=["resolution", "group", "ts"], name="uniq_pool_sample")
        ]
        indexes = [models.Index(fields=["resolution", "ts"], name="psample_res_ts")]

    def __str__(self) -> str:
        return f"{self.group_id} {self.resolution}@{self.ts:%Y-%m-%d %H:%M}"


class HealthAction(models.TextChoices):
    """What the GPU health rules did (scheduling.telemetry.health_rules.Action)."""

    MARK_UNHEALTHY = "mark_unhealthy", "Marked unhealthy"
    MARK_HEALTHY = "mark_healthy", "Recovered"
    DRAIN_NODE = "drain_node", "Drained the node"
    HOLD = "hold", "Held out (flapping)"


class GpuHealth(models.Model):
    """The health rules' memory of one GPU (streaks, trips, last fault: `state`, see
    `scheduling.telemetry.health.state_to_json`) and its last DCGM health reading."""

    gpu = models.OneToOneField(Gpu, on_delete=models.CASCADE, related_name="health")
    state = models.JSONField(default=dict)
    read_at = models.DateTimeField(null=True, blank=True)
    xid = models.PositiveIntegerField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    ecc_dbe_total = models.FloatField(null=True, blank=True)
    row_remap_failure = models.FloatField(null=True, blank=True)
    uncorrectable_remapped_rows = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"health of gpu {self.gpu_id}"


class GpuHealthEvent(models.Model):
    """One decision of the health rules about one GPU: the history shown on the node page."""

    ts = models.DateTimeField()
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="health_events")
    action = models.CharField(max_length=20, choices=HealthAction.choices)
    rule = models.CharField(max_length=20)
    reason = models.CharField(max_length=500)
    value = models.FloatField(null=True, blank=True)
    requeued = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-ts", "-id"]
        indexes = [models.Index(fields=["gpu", "-ts"], name="ghealth_gpu_ts")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.action}@{self.ts:%Y-%m-%d %H:%M}"
