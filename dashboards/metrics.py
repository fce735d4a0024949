"""`/metrics` in the Prometheus text exposition format (version 0.0.4).

Access: `Authorization: Bearer <TESSERA_METRICS_TOKEN>` (compared in constant time), or a staff session.
Without a configured token only staff sessions get in (the endpoint is then network-protected by the
usual login).

Families:

* `tessera_tenant_gpu_allocated_milli{tenant}` — GPU milli held now by active placements;
* `tessera_quota_gpu_{min,max,runtime,borrowed}_milli{pool,quota,tenant}` — quotas.usage snapshot;
* `tessera_pending_workloads{pool,tenant}` — PENDING GPU workloads;
* `tessera_pool_gpu_capacity_milli{pool}` / `tessera_pool_gpu_allocated_milli{pool}`;
* `tessera_scheduling_cycle_seconds{pool}` — histogram of the pool's scheduling-cycle latency as sampled
  each minute by telemetry over the retained 48 hours (a sliding window, so `histogram_quantile` over
  the buckets is meaningful; `rate()` is not);
* `tessera_placements_total{tenant}` — counter of placements ever made;
* `tessera_invariant_violations{invariant}` — violating rows the last invariant audit found
  (scheduling.services.audit; only invariants it checked), and
  `tessera_invariant_audit_timestamp_seconds` — when that audit ran;
* `tessera_gpu_healthy{node,gpu,uuid}` — 1 healthy, 0 taken out (by an operator or the health rules);
* `tessera_pending_oldest_wait_seconds{pool}` — how long the oldest PENDING GPU workload has waited;
* `tessera_quota_gpu_allocated_milli{pool,quota,tenant}` — GPU milli held by a quota's placements;
* `tessera_scheduling_heartbeat_age_seconds` — seconds since the last scheduling cycle started, and
  `tessera_scheduling_up` — 0 once that passes TESSERA_SCHEDULING_DOWN_AFTER_SECONDS (portal.heartbeat;
  both absent when tasks run eagerly).

The alerting rules shipped with the Helm chart (`deploy/helm/tessera/templates/prometheusrule.yaml`)
read these families.
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Min, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from portal.heartbeat import SchedulingStatus, read_scheduling_status
from quotas.models import Quota, QuotaGroup
from scheduling.choices import WorkloadState
from scheduling.models import Gpu, Placement, Workload
from scheduling.services.audit import invariant_statuses, latest_run
from scheduling.telemetry.ingestion import quota_figures
from scheduling.telemetry.models import PoolSample, Resolution

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Family:
    """One metric family: name, help, type and samples (labels, value)."""

    name: str
    help: str
    type: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, suffix: str = "", **labels: str) -> None:
        self.samples.append((suffix, labels, value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The text exposition of the families (HELP and TYPE once per family, then its samples)."""
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for suffix, labels, value in fam.samples:
            label_text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
            name = fam.name + suffix
            lines.append(
                f"{name}{{{label_text}}} {_number(value)}"
                if label_text
                else f"{name} {_number(value)}"
            )
    return "\n".join(lines) + "\n"


def histogram(
    fam: Family, values: Sequence[float], buckets: Sequence[float], **labels: str
) -> None:
    """Add cumulative `_bucket{le=…}`, `_sum` and `_count` samples of `values` to a histogram family."""
    for bound in buckets:
        fam.add(sum(1 for v in values if v <= bound), "_bucket", le=_number(bound), **labels)
    fam.add(len(values), "_bucket", le="+Inf", **labels)
    fam.add(round(sum(values), 6), "_sum", **labels)
    fam.add(len(values), "_count", **labels)


def collect() -> list[Family]:
    """Read the current figures from the database."""
    allocated = Family(
        "tessera_tenant_gpu_allocated_milli",
        "GPU compute held by active placements (1000 = one card).",
        "gauge",
    )
    for row in (
        Placement.objects.filter(released_at__isnull=True)
        .values("tenant__slug")
        .annotate(milli=Sum("gpu_milli_total"))
        .order_by("tenant__slug")
    ):
        allocated.add(float(row["milli"] or 0), tenant=row["tenant__slug"])

    quota_families = {
        key: Family(
            f"tessera_quota_gpu_{key}_milli",
            f"Quota {text} on the GPU side, GPU milli (quotas.usage snapshot).",
            "gauge",
        )
        for key, text in (
            ("min", "guaranteed minimum"),
            ("max", "burst maximum"),
            ("runtime", "runtime share now"),
            ("borrowed", "usage beyond min"),
        )
    }
    quotas = {q.pk: q for q in Quota.objects.select_related("group", "tenant")}
    for group in QuotaGroup.objects.order_by("name"):
        for quota_id, values in sorted(quota_figures(group).items()):
            quota = quotas.get(quota_id)
            if quota is None:
                continue
            labels = {"pool": group.name, "quota": quota.name, "tenant": quota.tenant.slug}
            for key, value in zip(("min", "max", "runtime", "borrowed"), values, strict=True):
                quota_families[key].add(value, **labels)

    pending = Family("tessera_pending_workloads", "GPU workloads waiting to be placed.", "gauge")
    for row in (
        Workload.objects.filter(state=WorkloadState.PENDING, gpu_count__gt=0)
        .values("quota__group__name", "tenant__slug")
        .annotate(n=Count("id"))
        .order_by("quota__group__name", "tenant__slug")
    ):
        pending.add(row["n"], pool=row["quota__group__name"], tenant=row["tenant__slug"])

    capacity = Family(
        "tessera_pool_gpu_capacity_milli",
        "Schedulable GPU compute of a pool (healthy GPUs).",
        "gauge",
    )
    pool_allocated = Family(
        "tessera_pool_gpu_allocated_milli", "GPU compute allocated in a pool.", "gauge"
    )
    latest = (
        PoolSample.objects.filter(resolution=Resolution.MINUTE)
        .order_by("-ts")
        .values_list("ts", flat=True)
        .first()
    )
    if latest is not None:
        for sample in (
            PoolSample.objects.filter(resolution=Resolution.MINUTE, ts=latest)
            .select_related("group")
            .order_by("group__name")
        ):
            capacity.add(sample.capacity_milli, pool=sample.group.name)
            pool_allocated.add(sample.allocated_milli, pool=sample.group.name)

    cycles = Family(
        "tessera_scheduling_cycle_seconds",
        "Scheduling-cycle latency per pool, sampled each minute over the retained 48 hours.",
        "histogram",
    )
    per_pool: dict[str, list[float]] = defaultdict(list)
    for name, ms in (
        PoolSample.objects.filter(resolution=Resolution.MINUTE, cycle_ms__isnull=False)
        .values_list("group__name", "cycle_ms")
        .order_by("group__name", "ts")
    ):
        if ms is not None:
            per_pool[name].append(ms / 1000)
    for name in sorted(per_pool):
        histogram(cycles, per_pool[name], CYCLE_BUCKETS, pool=name)

    placements = Family("tessera_placements_total", "Placements made (ever).", "counter")
    for row in (
        Placement.objects.values("tenant__slug").annotate(n=Count("id")).order_by("tenant__slug")
    ):
        placements.add(row["n"], tenant=row["tenant__slug"])

    violations = Family(
        "tessera_invariant_violations",
        "Rows violating each scheduler invariant in the last audit (0 = the promise holds).",
        "gauge",
    )
    audited_at = Family(
        "tessera_invariant_audit_timestamp_seconds",
        "When the last invariant audit ran (Unix time).",
        "gauge",
    )
    run = latest_run()
    if run is not None:
        audited_at.add(run.started_at.timestamp())
        for status in invariant_statuses(run):
            if status.status in ("ok", "violated"):
                violations.add(status.count, invariant=status.name)

    return [
        allocated,
        *quota_families.values(),
        pending,
        capacity,
        pool_allocated,
        cycles,
        placements,
        violations,
        audited_at,
        *health_and_wait_families(timezone.now()),
        *heartbeat_families(read_scheduling_status()),
    ]


def heartbeat_families(status: SchedulingStatus) -> list[Family]:
    """Whether scheduling cycles happen (portal.heartbeat), for alerting on a dead worker or beat."""
    age = Family(
        "tessera_scheduling_heartbeat_age_seconds",
        "Seconds since the last scheduling cycle started (since the web process started when none ran).",
        "gauge",
    )
    up = Family(
        "tessera_scheduling_up",
        "1 while scheduling cycles start within TESSERA_SCHEDULING_DOWN_AFTER_SECONDS, else 0.",
        "gauge",
    )
    if status.watched:
        age.add(round(status.age_seconds, 3))
        up.add(1 if status.up else 0)
    return [age, up]


def health_and_wait_families(now: datetime) -> list[Family]:
    """GPU health, the oldest wait per pool and the allocation per quota (module docstring)."""
    healthy = Family(
        "tessera_gpu_healthy",
        "1 = the GPU takes work, 0 = taken out (operator or health rule).",
        "gauge",
    )
    for node, index, uuid, ok in Gpu.objects.order_by("node__name", "index").values_list(
        "node__name", "index", "uuid", "healthy"
    ):
        healthy.add(1.0 if ok else 0.0, node=node, gpu=str(index), uuid=uuid)
    oldest = Family(
        "tessera_pending_oldest_wait_seconds",
        "How long the oldest pending GPU workload of a pool has waited.",
        "gauge",
    )
    for row in (
        Workload.objects.filter(state=WorkloadState.PENDING, gpu_count__gt=0)
        .values("quota__group__name")
        .annotate(first=Min("submitted_at"))
        .order_by("quota__group__name")
    ):
        wait = max((now - row["first"]).total_seconds(), 0.0)
        oldest.add(round(wait, 3), pool=row["quota__group__name"])
    per_quota = Family(
        "tessera_quota_gpu_allocated_milli",
        "GPU compute held by a quota's active placements (1000 = one card).",
        "gauge",
    )
    for row in (
        Placement.objects.filter(released_at__isnull=True)
        .values("workload__quota__group__name", "workload__quota__name", "tenant__slug")
        .annotate(milli=Sum("gpu_milli_total"))
        .order_by("workload__quota__group__name", "workload__quota__name")
    ):
        per_quota.add(
            float(row["milli"] or 0),
            pool=row["workload__quota__group__name"],
            quota=row["workload__quota__name"],
            tenant=row["tenant__slug"],
        )
    return [healthy, oldest, per_quota]


def _authorized(request: HttpRequest) -> bool:
    token = settings.TESSERA_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.is_staff)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus scrape endpoint (Bearer token or staff session; 401 otherwise)."""
    if not _authorized(request):
        response = HttpResponse(
            "metrics: send Authorization: Bearer <TESSERA_METRICS_TOKEN>\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render(collect()), content_type=CONTENT_TYPE)
