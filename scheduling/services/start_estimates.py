"""When will a waiting workload start? A range with the reason, for every pending workload of a group.

Read the group's engine snapshot (the cycle's, with the placed work applied), its pending workloads in queue
order and the recorded run times of its finished workloads, then let `core.simulation.estimate_starts`
replay forward with no further arrivals, once with everything ending early and once late. Run times are
looked up per template (a workload's kind, image and size: a codespace template or a job's pods), else per
team (kind and quota), else per kind, the first with enough history; work still running counts as a run at
least as long as it has run so far. The forward replay checks every quota's GPU max at each step and
starts a gang's members together. The result is cached per group for
`TESSERA_START_ESTIMATE_CACHE_SECONDS` and keyed by the shard's version and the queue, so a page or an API
call costs one forward replay per group at most every few seconds.

Limit (said in `docs/scheduling.md`): work submitted later is not foreseen.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import F
from django.utils import timezone

from core.placement import typical_pods
from core.simulation import (
    DurationModel,
    ReplayOptions,
    Running,
    RunningWork,
    TeamQuota,
    TimedRequest,
    estimate_starts,
)
from quotas.models import Quota, QuotaGroup
from scheduling.choices import WorkloadState
from scheduling.models import Workload
from scheduling.services.snapshot import ensure_shard, snapshot_for_group, workload_request

#: Finished workloads whose run times feed the forecast (the most recent ones of the group).
HISTORY = 2000
#: Pending workloads forecast per group (the queue's head; later ones are told they are far back).
MAX_PENDING = 500


@dataclass(frozen=True)
class StartEstimate:
    """A pending workload's likely start (``None`` bounds: unknown / not within 30 days)."""

    workload_id: int
    earliest: datetime | None
    latest: datetime | None
    position: int
    reason: str
    computed_at: datetime

    @property
    def summary(self) -> str:
        """ "likely in 20–40 min", "likely within 5 min", "not expected within 30 days"."""
        return describe_range(self.earliest, self.latest, self.computed_at)


def _minutes_text(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    if minutes < 90:
        return f"{minutes} min"
    hours = seconds / 3600
    if hours < 48:
        return f"{round(hours)} h"
    return f"{round(hours / 24)} days"


def describe_range(earliest: datetime | None, latest: datetime | None, now: datetime) -> str:
    """A range of start times as people say it, relative to ``now``."""
    if earliest is None:
        return "not expected within 30 days"
    low = max(0.0, (earliest - now).total_seconds())
    if latest is None:
        return f"likely in {_minutes_text(low)} or later"
    high = max(low, (latest - now).total_seconds())
    if high < 300:
        return "likely within 5 min"
    low_text, high_text = _minutes_text(low), _minutes_text(high)
    if low_text == high_text:
        return f"likely in about {high_text}"
    low_number, low_unit = low_text.split(" ")
    high_number, high_unit = high_text.split(" ")
    if low_unit == high_unit:
        return f"likely in {low_number}–{high_number} {high_unit}"
    return f"likely in {low_text} – {high_text}"


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


#: The fields of a workload its duration groups are read from (see :func:`duration_groups`).
GROUP_FIELDS = ("kind", "quota_id", "image", "cpu_milli", "memory_mib", "gpu_count", "gpu_milli")


def duration_groups(
    kind: str,
    quota_id: int,
    image: str,
    cpu_milli: int,
    memory_mib: int,
    gpu_count: int,
    gpu_milli: int,
) -> tuple[str, str, str]:
    """A workload's duration groups, most specific first: its template (kind, image and size, what a
    codespace template or a job's pods share), its team (kind and quota), its kind."""
    shape = f"{cpu_milli}/{memory_mib}/{gpu_count}x{gpu_milli}"
    return (f"template:{kind}:{image}:{shape}", f"team:{kind}:{quota_id}", f"kind:{kind}")


def _durations(group: QuotaGroup) -> DurationModel:
    rows = (
        Workload.objects.filter(
            quota__group=group, started_at__isnull=False, finished_at__isnull=False
        )
        .order_by("-finished_at")
        .values_list(*GROUP_FIELDS, "started_at", "finished_at")[:HISTORY]
    )
    groups: dict[str, list[int]] = {}
    for *fields, started, finished in rows:
        if started is None or finished is None:  # excluded by the filter; the type does not know
            continue
        seconds = max(1, int((finished - started).total_seconds()))
        for key in duration_groups(*fields):
            groups.setdefault(key, []).append(seconds)
    return DurationModel({k: tuple(v) for k, v in groups.items()})


def _quotas(group: QuotaGroup) -> tuple[TeamQuota, ...]:
    """Every quota of the group as the replay's cap: its GPU-side max of GPU compute."""
    rows = Quota.objects.filter(group=group).order_by("pk").values_list("pk", "gpu_max_gpu_milli")
    return tuple(TeamQuota(str(pk), int(limit)) for pk, limit in rows)


def compute_group_estimates(group: QuotaGroup, now: datetime) -> dict[int, StartEstimate]:
    """The start estimate of every pending workload of ``group`` (at most :data:`MAX_PENDING`)."""
    pending = list(
        Workload.objects.filter(quota__group=group, state=WorkloadState.PENDING).order_by(
            F("queue_position").asc(nulls_last=True), "-priority", "submitted_at", "pk"
        )[:MAX_PENDING]
    )
    if not pending:
        return {}
    cluster = snapshot_for_group(group)
    durations = _durations(group)
    clock = _epoch(now)
    running = []
    rows = Workload.objects.filter(pk__in=list(cluster.applied)).values_list(
        "pk", *GROUP_FIELDS, "started_at", "placed_at", "submitted_at"
    )
    for pk, *fields, started, placed, submitted in rows:
        since = started or placed or submitted
        running.append(
            RunningWork(
                Running(cluster.applied[pk], end=clock, team=str(fields[1])),
                started=min(clock, _epoch(since)),
                group=duration_groups(*fields),
            )
        )
    waiting = [
        (
            TimedRequest(
                workload_request(w),
                min(clock, _epoch(w.submitted_at)),
                0,
                str(w.quota_id),
                gang="" if w.gang_id is None else str(w.gang_id),
            ),
            duration_groups(*(getattr(w, name) for name in GROUP_FIELDS)),
        )
        for w in pending
    ]
    typical = typical_pods([*cluster.recent, *(t.request for t, _ in waiting)])
    options = ReplayOptions(
        policy=settings.TESSERA_PLACEMENT_POLICY, typical=typical, quotas=_quotas(group)
    )
    out = estimate_starts(cluster.state, running, waiting, durations, clock, options)

    def moment(seconds: int | None) -> datetime | None:
        return None if seconds is None else now + timedelta(seconds=seconds - clock)

    return {
        w.pk: StartEstimate(
            w.pk,
            moment(out[str(w.pk)].earliest),
            moment(out[str(w.pk)].latest),
            out[str(w.pk)].position,
            out[str(w.pk)].reason,
            now,
        )
        for w in pending
    }


def _cache_key(group: QuotaGroup) -> str:
    version = ensure_shard(group.pk).version
    queue = Workload.objects.filter(quota__group=group, state=WorkloadState.PENDING).order_by("pk")
    ids = ",".join(str(pk) for pk in queue.values_list("pk", flat=True)[:MAX_PENDING])
    digest = hashlib.sha256(ids.encode()).hexdigest()[:16]
    return f"tessera:start-estimates:{group.pk}:{version}:{digest}"


def group_estimates(group: QuotaGroup) -> dict[int, StartEstimate]:
    """:func:`compute_group_estimates`, cached (see the module docstring)."""
    key = _cache_key(group)
    hit = cache.get(key)
    if hit is not None:
        return dict(hit)
    estimates = compute_group_estimates(group, timezone.now())
    cache.set(key, estimates, settings.TESSERA_START_ESTIMATE_CACHE_SECONDS)
    return estimates


def estimate_for(workload: Workload) -> StartEstimate | None:
    """The start estimate of one workload, or ``None`` when it is not waiting."""
    if workload.state != WorkloadState.PENDING:
        return None
    group = QuotaGroup.objects.get(quotas__pk=workload.quota_id)
    return group_estimates(group).get(workload.pk)


def estimates_for(workloads: Iterable[Workload]) -> list[StartEstimate]:
    """The estimates of the waiting ones among ``workloads`` (one forecast per quota group)."""
    waiting = [w for w in workloads if w.state == WorkloadState.PENDING]
    quotas = Quota.objects.filter(pk__in={w.quota_id for w in waiting}).select_related("group")
    group_of = {q.pk: q.group for q in quotas}
    by_group = {g.pk: group_estimates(g) for g in group_of.values()}
    found = (by_group[group_of[w.quota_id].pk].get(w.pk) for w in waiting)
    return [e for e in found if e is not None]


def not_waiting_payload(workload_id: int | None, state: str) -> dict[str, Any]:
    """The API's answer for something that does not wait."""
    return {
        "workload": workload_id,
        "state": state,
        "waiting": False,
        "earliest": None,
        "latest": None,
        "summary": None,
        "reason": None,
        "position": None,
        "computed_at": None,
    }


def start_estimate_payload(workload: Workload) -> dict[str, Any]:
    """The API's (and the CLI's) view of :func:`estimate_for`."""
    estimate = estimate_for(workload)
    if estimate is None:
        return not_waiting_payload(workload.pk, workload.state)
    return {
        "workload": workload.pk,
        "state": workload.state,
        "waiting": True,
        "earliest": estimate.earliest,
        "latest": estimate.latest,
        "summary": estimate.summary,
        "reason": estimate.reason,
        "position": estimate.position,
        "computed_at": estimate.computed_at,
    }
