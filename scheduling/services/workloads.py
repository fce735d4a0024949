"""Submitting, releasing and requeueing workloads and gangs. Every function is one transaction; cycles and
backend calls are enqueued on commit; observers hear about every state change after commit."""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.units import (
    MILLI_PER_GPU,
    WHOLE_CARD_MILLI,
    mig_gpu_equivalent_milli,
    mig_memory_mib,
    mig_profile_error,
)
from portal.db import insert
from portal.errors import Conflict, InvalidInput, NotFoundError
from portal.labels import node_label_errors
from portal.models import Tenant
from portal.periodic import ItemFailures, run_each
from portal.redis_clients import redis_client
from portal.transactions import retry_transaction
from quotas.models import Quota, QuotaGroup
from quotas.reclaim import with_whole_gangs
from quotas.sharing import request_errors
from scheduling import limits, observers
from scheduling.choices import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    GangState,
    GangTopologyMode,
    TopologyPolicy,
    UtilizationProfile,
    WorkloadKind,
    WorkloadState,
)
from scheduling.followups import BackendRelease, followups
from scheduling.lock_objects import lock_shard, lock_shards
from scheduling.models import Gang, Placement, Workload
from scheduling.services.charge import PoolCards, recharge_pending, whole_card_memory_mib
from scheduling.services.feasibility import check_gang_fits
from scheduling.services.pool_cache import one_inventory_reading
from scheduling.services.slicing import models_for_slice, whole_card_only_models
from scheduling.services.snapshot import bump_shards_for_nodes
from scheduling.services.topology import group_levels

logger = logging.getLogger(__name__)

MAX_GPUS_PER_WORKLOAD = 16
MAX_GANG_MEMBERS = 512
PRIORITY_RANGE = (-1000, 1000)
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# ------------------------------------------------------------------------------------------ triggers
def trigger_cycle(group_id: int) -> None:
    """Run the shard's scheduling cycle after the current transaction commits.

    Deduplicated through Redis (`REDIS_URL`): while a cycle of the group is queued and has not started,
    further triggers add nothing (the task clears the key when it starts; the key expires after a few
    intervals in case the task was lost). Without Redis every trigger is sent: an idle cycle costs one
    locked query.
    """

    def send() -> None:
        ttl = max(2, int(3 * float(settings.TESSERA_CYCLE_INTERVAL_SECONDS)))
        if not dedupe_triggers() or redis_client(settings.REDIS_URL).set(
            cycle_queued_key(group_id), 1, nx=True, ex=ttl
        ):
            followups().run_cycle(group_id)

    transaction.on_commit(send)


def cycle_queued_key(group_id: int) -> str:
    return f"tessera:cycle-queued:{group_id}"


def dedupe_triggers() -> bool:
    """Triggers are deduplicated only through a Redis every process shares."""
    return bool(settings.REDIS_URL) and not settings.CELERY_TASK_ALWAYS_EAGER


def clear_cycle_queued(group_id: int) -> None:
    """A cycle of the group starts: the next trigger must be sent again."""
    if dedupe_triggers():
        redis_client(settings.REDIS_URL).delete(cycle_queued_key(group_id))


# A workload and the placement whose cluster objects must go (None: the workload holds none; its
# objects, if any, are removed whatever placement made them).
HeldPlacement = tuple[Workload, int | None]


def release_on_backend(held: Iterable[HeldPlacement], *, delete_home: bool = False) -> None:
    """Remove the cluster objects of these placements after commit (a task, retried on transient
    errors). Keyed by placement: the release may run after the workload was placed again, and must
    then leave the new placement's objects alone."""
    items = [
        BackendRelease(w.pk, backend_name(w), delete_home, w.home_volume, placement_id)
        for w, placement_id in held
    ]
    if not items:
        return

    def send() -> None:
        followups().release_all(items)

    transaction.on_commit(send)


def backend_name(w: Workload) -> str:
    """The deterministic, DNS-safe name of a workload's cluster objects (create-or-get by name)."""
    prefix = "cs" if w.kind == WorkloadKind.CODESPACE else "pod"
    slug = re.sub(r"[^a-z0-9-]+", "-", w.name.lower()).strip("-")[:40] or "w"
    return f"{prefix}-{slug}-{w.pk}"


# ------------------------------------------------------------------------------------------ validation
def validate_resources(
    *,
    cpu_milli: Any,
    memory_mib: Any,
    gpu_count: Any,
    gpu_milli: Any,
    gpu_memory_mib: Any,
    gpu_models: Any,
    node_labels: Any,
    topology: Any,
    priority: Any,
    profile: Any,
    mig_profile: Any = "",
) -> dict[str, Any]:
    """The request's resources checked and normalised (the submit path, the preview and the bench
    share it): InvalidInput naming every bad field, nothing written."""
    errors: dict[str, list[str]] = {}

    def as_int(name: str, value: Any, lo: int, hi: int) -> int:
        try:
            v = int(value)
            if isinstance(value, bool) or v != value and not isinstance(value, str):
                raise ValueError
        except (TypeError, ValueError):
            errors.setdefault(name, []).append(f"Must be a whole number, got {value!r}.")
            return 0
        if not lo <= v <= hi:
            errors.setdefault(name, []).append(f"Must be between {lo} and {hi}, got {v}.")
        return v

    out: dict[str, Any] = {
        "cpu_milli": as_int("cpu_milli", cpu_milli, 1, 10_000_000),
        "memory_mib": as_int("memory_mib", memory_mib, 1, 100_000_000),
        "gpu_count": as_int("gpu_count", gpu_count, 0, MAX_GPUS_PER_WORKLOAD),
        "gpu_milli": as_int("gpu_milli", gpu_milli, 0, MILLI_PER_GPU),
        "gpu_memory_mib": as_int("gpu_memory_mib", gpu_memory_mib, 0, 10_000_000),
        "priority": as_int("priority", priority, *PRIORITY_RANGE),
    }
    if not errors:
        if out["gpu_count"] == 0 and (out["gpu_milli"] or out["gpu_memory_mib"]):
            errors["gpu_count"] = ["Set gpu_count to at least 1 to ask for GPU compute or memory."]
        if out["gpu_count"] >= 1 and out["gpu_milli"] == 0:
            errors["gpu_milli"] = [
                f"A GPU request needs gpu_milli between 1 and {MILLI_PER_GPU} ({MILLI_PER_GPU} = whole cards)."
            ]
        if out["gpu_count"] > 1 and 0 < out["gpu_milli"] < MILLI_PER_GPU:
            errors["gpu_milli"] = [
                f"A slice ({out['gpu_milli']}m) is on exactly one GPU; for {out['gpu_count']} GPUs ask "
                f"for whole cards ({MILLI_PER_GPU})."
            ]
    if out["gpu_count"] and out["gpu_milli"] >= WHOLE_CARD_MILLI:
        out["gpu_memory_mib"] = 0  # a whole card comes with all its memory
    raw_models = gpu_models or ()
    models = list(raw_models) if isinstance(raw_models, list | tuple) else [None]
    if not all(isinstance(m, str) and m.strip() for m in models):
        errors["gpu_models"] = ["A list of GPU model names (at most 16), e.g. ['A100', 'H100']."]
    elif model_errors := limits.gpu_model_errors(models):
        errors["gpu_models"] = model_errors
    out["gpu_models"] = [m.strip() for m in models if isinstance(m, str)]
    labels = node_labels or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        errors["node_labels"] = ['An object of label names to values, e.g. {"zone": "zone-a"}.']
        labels = {}
    elif label_errors := node_label_errors(labels):
        errors["node_labels"] = label_errors
    out["node_labels"] = dict(labels)
    if topology not in TopologyPolicy.values:
        errors["topology"] = [f"One of {', '.join(TopologyPolicy.values)}; got {topology!r}."]
    out["topology"] = topology
    if profile not in UtilizationProfile.values:
        errors["profile"] = [f"One of {', '.join(UtilizationProfile.values)}; got {profile!r}."]
    out["profile"] = profile
    out["mig_profile"] = ""
    if mig_profile not in (None, ""):
        if reason := mig_profile_error(mig_profile):
            errors["mig_profile"] = [reason]
        elif (
            out["gpu_count"] > 1
            or out["gpu_milli"] not in (0, MILLI_PER_GPU)
            or out["gpu_memory_mib"]
        ):
            errors["mig_profile"] = [
                "A MIG profile is one GPU instance: leave gpu_count, gpu_milli and gpu_memory_mib unset."
            ]
        else:
            out["mig_profile"] = mig_profile
    if errors:
        first = next(iter(errors.items()))
        raise InvalidInput(f"Invalid {first[0]}: {first[1][0]}", fields=errors)
    return out


def unknown_model_error(gpu_models: Sequence[str], cards: PoolCards) -> str:
    """Why `gpu_models` names a model no card of the inventory has ("" when every name is known): such
    a request could never be placed, and its name would be stored and exported as the member typed it."""
    known = cards.anywhere if gpu_models else {}
    unknown = [m for m in gpu_models if m not in known]
    if not unknown:
        return ""
    return f"Unknown GPU model {unknown[0]!r}: the inventory has {', '.join(sorted(known)) or 'no GPUs'}."


def fit_to_pool(res: dict[str, Any], cards: PoolCards, group: QuotaGroup) -> dict[str, Any]:
    """The pool-dependent part of a validated request (`validate_resources`), in place: a slice is
    restricted to GPU models that can be shared (scheduling.services.slicing), a whole card gets the
    memory it is charged while pending (scheduling.services.charge); the pool's sharing mode decides
    whether it may ask for a slice at all (quotas.sharing). Raises InvalidInput."""
    mig_profile = res.get("mig_profile", "")
    refused = request_errors(
        group.sharing,
        gpu_count=res["gpu_count"],
        gpu_milli=res["gpu_milli"],
        mig_profile=mig_profile,
        gpu_memory_mib=res["gpu_memory_mib"],
    )
    if refused:
        reasons = next(iter(refused.values()))
        raise InvalidInput(f"Pool {group.name}: {reasons[0]}", fields=refused)
    if unknown := unknown_model_error(res["gpu_models"], cards):
        raise InvalidInput(unknown, fields={"gpu_models": [unknown]})
    if mig_profile:
        # One GPU instance; quotas count it as its GPU-equivalent (quotas.sharing), its memory is the
        # profile's. The cycle places it with the MIG engine (card + position).
        res.update(
            gpu_count=1,
            gpu_milli=mig_gpu_equivalent_milli(mig_profile),
            gpu_memory_mib=mig_memory_mib(mig_profile),
            whole_card_memory_mib=0,
        )
        return res
    whole_card_only = whole_card_only_models()
    if res["gpu_count"] and res["gpu_milli"] < WHOLE_CARD_MILLI and whole_card_only:
        res["gpu_models"] = models_for_slice(
            pool_models=cards.in_pool,
            gpu_models=res["gpu_models"],
            whole_card_only=whole_card_only,
            pool_name=group.name,
        )
    res["whole_card_memory_mib"] = whole_card_memory_mib(
        cards,
        gpu_count=res["gpu_count"],
        gpu_milli=res["gpu_milli"],
        gpu_models=res["gpu_models"],
    )
    return res


def _check_gang_topology(group: QuotaGroup, level: Any, mode: Any) -> None:
    """A job's topology request names a level of its pool and a mode (InvalidInput otherwise)."""
    if mode not in GangTopologyMode.values:
        raise InvalidInput(
            f"Unknown topology_mode {str(mode)[:40]!r}.",
            fields={"topology_mode": [f"One of {', '.join(GangTopologyMode.values)}."]},
        )
    if level in (None, ""):
        return
    names = [lv.name for lv in group_levels(group.pk)]
    if level not in names:
        raise InvalidInput(
            f"Pool {group.name} has no topology level {str(level)[:40]!r}.",
            fields={
                "topology_level": [
                    f"One of {', '.join(names)} (widest first), or blank for anywhere."
                    if names
                    else f"Pool {group.name} has no topology levels: leave it blank."
                ]
            },
        )


def _check_quota(tenant: Tenant, quota: Quota) -> None:
    if quota.tenant_id != tenant.pk:
        raise InvalidInput(
            f"Quota {quota} belongs to another tenant, not {tenant.slug}.",
            fields={"quota": ["Choose a quota of your tenant."]},
        )


def _check_name(name: Any, field: str = "name") -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or len(name) > 63:
        raise InvalidInput(
            f"Invalid {field} {name!r}: use 1-63 lowercase letters, digits and dashes.",
            fields={
                field: ["1-63 lowercase letters, digits and dashes, not starting with a dash."]
            },
        )
    return name


# ------------------------------------------------------------------------------------------ submit
@one_inventory_reading()
def submit_workload(
    *,
    tenant: Tenant,
    quota: Quota,
    kind: str,
    name: str,
    owner: Any = None,
    cpu_milli: int,
    memory_mib: int,
    gpu_count: int = 0,
    gpu_milli: int = 0,
    gpu_memory_mib: int = 0,
    gpu_models: Sequence[str] = (),
    node_labels: Mapping[str, str] | None = None,
    topology: str = "none",
    priority: int = 0,
    preemptible: bool = True,
    profile: str = "development",
    image: str = "",
    gang: Gang | None = None,
    home_volume: str = "",
    home_volume_gib: int = 0,
    pk: int | None = None,
    mig_profile: str = "",
) -> Workload:
    """Validate and queue one workload (PENDING); its shard's cycle runs after commit. `pk` is a
    primary key reserved with `portal.db.reserve_ids` (the caller's other rows already name it).

    `home_volume` names a persistent volume of `home_volume_gib` that outlives the workload: the next
    workload with the same name mounts it again (a codespace stopped and started keeps its home).

    Raises InvalidInput (with `fields`) for malformed resources or a quota of another tenant.
    """
    if home_volume:
        _check_name(home_volume, "home_volume")
    if not isinstance(home_volume_gib, int) or home_volume_gib < 0 or home_volume_gib > 65536:
        raise InvalidInput(
            f"Home volume size {home_volume_gib!r} GiB is out of range.",
            fields={"home_volume_gib": ["A whole number of GiB from 0 to 65536."]},
        )
    if kind not in WorkloadKind.values:
        raise InvalidInput(
            f"Unknown kind {kind!r}.",
            fields={"kind": [f"One of {', '.join(WorkloadKind.values)}."]},
        )
    _check_name(name)
    _check_quota(tenant, quota)
    res = validate_resources(
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpu_count=gpu_count,
        gpu_milli=gpu_milli,
        gpu_memory_mib=gpu_memory_mib,
        gpu_models=gpu_models,
        node_labels=node_labels,
        topology=topology,
        priority=priority,
        profile=profile,
        mig_profile=mig_profile,
    )
    res = fit_to_pool(res, PoolCards.of(quota.group), quota.group)
    # No savepoint inside a caller's transaction (a codespace create): nothing here is caught and
    # retried, a failure aborts the caller's transaction as a whole.
    with transaction.atomic(savepoint=False):
        w = Workload(
            pk=pk,
            tenant=tenant,
            quota=quota,
            owner=owner,
            kind=kind,
            name=name,
            gang=gang,
            image=image or "",
            home_volume=home_volume,
            home_volume_gib=home_volume_gib if home_volume else 0,
            preemptible=bool(preemptible),
            pending_reason="Waiting for the next scheduling cycle.",
            pending_code="queued",
            **res,
        )
        insert(w)
        trigger_cycle(quota.group_id)
    return w


@one_inventory_reading()
def submit_gang(
    *,
    tenant: Tenant,
    quota: Quota,
    name: str,
    owner: Any,
    members: Sequence[Mapping[str, Any]],
    min_available: int,
    timeout_seconds: int,
    priority: int = 0,
    preemptible: bool = True,
    topology_level: str = "",
    topology_mode: str = GangTopologyMode.REQUIRED,
    movable: bool = True,
) -> Gang:
    """Queue a gang job: its members (dicts of submit_workload resource fields) are placed together, at
    least `min_available` of them, or none; after `timeout_seconds` without that it times out. A job
    that can never fit its pool is refused (`feasibility.NeverFits`, with the numbers). With
    `topology_level` (a level of the pool's topology, `scheduling.topology`) all its pods go in one
    domain of that level: `required` (else it waits) or `preferred`."""
    _check_name(name)
    _check_quota(tenant, quota)
    _check_gang_topology(quota.group, topology_level, topology_mode)
    if not isinstance(members, Sequence) or not 1 <= len(members) <= MAX_GANG_MEMBERS:
        raise InvalidInput(
            f"A job has 1 to {MAX_GANG_MEMBERS} pods.",
            fields={"members": [f"Give 1 to {MAX_GANG_MEMBERS} pods."]},
        )
    try:
        min_available = int(min_available)
        timeout_seconds = int(timeout_seconds)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            "min_available and timeout_seconds must be whole numbers.",
            fields={"min_available": ["A whole number."], "timeout_seconds": ["A whole number."]},
        ) from exc
    if not 1 <= min_available <= len(members):
        raise InvalidInput(
            f"min_available must be between 1 and the number of pods ({len(members)}), got "
            f"{min_available}.",
            fields={"min_available": [f"Between 1 and {len(members)}."]},
        )
    if not 1 <= timeout_seconds <= 7 * 24 * 3600:
        raise InvalidInput(
            f"timeout_seconds must be between 1 and 604800 (7 days), got {timeout_seconds}.",
            fields={"timeout_seconds": ["Between 1 and 604800."]},
        )
    specs = []
    cards = PoolCards.of(quota.group)
    for i, m in enumerate(members):
        try:
            specs.append(
                fit_to_pool(
                    validate_resources(
                        cpu_milli=m.get("cpu_milli"),
                        memory_mib=m.get("memory_mib"),
                        gpu_count=m.get("gpu_count", 0),
                        gpu_milli=m.get("gpu_milli", 0),
                        gpu_memory_mib=m.get("gpu_memory_mib", 0),
                        gpu_models=m.get("gpu_models", ()),
                        node_labels=m.get("node_labels"),
                        topology=m.get("topology", "none"),
                        priority=priority,
                        profile=m.get("profile", UtilizationProfile.TRAINING),
                        mig_profile=m.get("mig_profile", ""),
                    ),
                    cards,
                    quota.group,
                )
                | {"image": str(m.get("image", "") or "")}
            )
        except InvalidInput as exc:
            raise InvalidInput(
                f"Pod {i}: {exc.message}",
                fields={f"members[{i}].{k}": v for k, v in exc.fields.items()},
            ) from exc
        except AttributeError as exc:
            raise InvalidInput(
                f"Pod {i} must be an object of resources.", fields={f"members[{i}]": ["An object."]}
            ) from exc
    mig_pods = sum(1 for spec in specs if spec["mig_profile"])
    if 0 < mig_pods < len(specs):
        # a MIG gang is placed all together by the MIG engine (scheduling.services.decide._plan_mig)
        raise InvalidInput(
            "A job's pods are all MIG instances or none.",
            fields={"pods": ["Give every pod a MIG profile, or none."]},
        )
    check_gang_fits(quota.group, specs, min_available=min_available)
    now = timezone.now()
    try:
        with transaction.atomic():
            gang = Gang.objects.create(
                name=name,
                tenant=tenant,
                quota=quota,
                owner=owner,
                min_available=min_available,
                timeout_seconds=timeout_seconds,
                topology_level=topology_level or "",
                topology_mode=topology_mode,
                deadline_at=now + timedelta(seconds=timeout_seconds),
                reason="Waiting for the next scheduling cycle.",
            )
            Workload.objects.bulk_create(
                [
                    Workload(
                        tenant=tenant,
                        quota=quota,
                        owner=owner,
                        kind=WorkloadKind.JOB_POD,
                        name=f"{name}-{i}"[:63],
                        gang=gang,
                        preemptible=bool(preemptible),
                        movable=bool(movable),
                        pending_reason="Waiting for the next scheduling cycle.",
                        pending_code="queued",
                        **spec,
                    )
                    for i, spec in enumerate(specs)
                ]
            )
            trigger_cycle(quota.group_id)
    except IntegrityError as exc:
        raise Conflict(
            f"A job named {name!r} already exists in {tenant.slug}.",
            fields={"name": ["This name is taken; choose another."]},
        ) from exc
    return gang


# ------------------------------------------------------------------------------------------ release
def _release_placements(workloads: Sequence[Workload], now: Any) -> list[HeldPlacement]:
    """Close the active placements of `workloads`; returns those that held one, with the placement
    closed. Bumps the shards."""
    ids = [w.pk for w in workloads]
    held = list(
        Placement.objects.filter(workload_id__in=ids, released_at__isnull=True).values_list(
            "workload_id", "pk", "node_id"
        )
    )
    if not held:
        return []
    Placement.objects.filter(workload_id__in=ids, released_at__isnull=True).update(released_at=now)
    bump_shards_for_nodes({node_id for _, _, node_id in held})
    placement_of = {wid: pk for wid, pk, _ in held}
    return [(w, placement_of[w.pk]) for w in workloads if w.pk in placement_of]


def _finish(
    workloads: Sequence[Workload],
    *,
    state: str,
    reason: str,
    now: Any,
    pending_reason: str = "",
    pending_code: str = "",
) -> list[HeldPlacement]:
    """Move `workloads` to a terminal `state` with `reason`, closing their placements; returns those
    that held one, with that placement (its cluster objects must go). Caller holds the shard lock."""
    held = _release_placements(workloads, now)
    Workload.objects.filter(pk__in=[w.pk for w in workloads]).update(
        state=state,
        finished_at=now,
        failure_reason=reason,
        pending_reason=pending_reason,
        pending_code=pending_code,
        queue_position=None,
        updated_at=now,
    )
    return held


def _gangs_touched(workloads: Iterable[Workload]) -> set[int]:
    return {w.gang_id for w in workloads if w.gang_id}


def refresh_gang_states(gang_ids: Iterable[int]) -> None:
    """Derive each gang's state from its members (placed/running/finished), never undoing a timeout.

    The deadline bounds gathering only: a PLACED or RUNNING gang that goes back to WAITING (a member
    was requeued) gets a fresh one, `timeout_seconds` from now, instead of being timed out at once by
    the deadline it met long ago."""
    now = timezone.now()
    for gang in Gang.objects.filter(pk__in=set(gang_ids)).prefetch_related("members"):
        if gang.state in (GangState.TIMED_OUT, GangState.CANCELLED):
            continue
        states = [m.state for m in gang.members.all()]
        active = sum(s in ACTIVE_STATES for s in states)
        running = sum(s == WorkloadState.RUNNING for s in states)
        new = gang.state
        if all(s in TERMINAL_STATES for s in states):
            if any(s == WorkloadState.FAILED for s in states):
                new = GangState.FAILED
            elif all(s == WorkloadState.SUCCEEDED for s in states):
                new = GangState.SUCCEEDED
            else:
                new = GangState.CANCELLED
        elif running >= gang.min_available and running == active:
            new = GangState.RUNNING
        elif active >= gang.min_available:
            new = GangState.PLACED
        else:
            new = GangState.WAITING
        if new == gang.state:
            continue
        changes: dict[str, Any] = {"state": new, "updated_at": now}
        if new in (GangState.PLACED, GangState.RUNNING):
            changes["reason"] = ""  # it no longer waits: the reason it waited is gone with it
        if new == GangState.WAITING and gang.state in (GangState.PLACED, GangState.RUNNING):
            changes["deadline_at"] = now + timedelta(seconds=gang.timeout_seconds)
            changes["reason"] = "A pod was requeued; waiting for the next scheduling cycle."
        Gang.objects.filter(pk=gang.pk).update(**changes)


def _lock_shards_of(workload_ids: Sequence[int]) -> set[int]:
    """Lock the shards of these workloads and of their gangs (in id order); returns their group ids.
    The first lock of every requeue and fail (docs/adr/0002: shards, then workload rows)."""
    groups = set(
        Workload.objects.filter(pk__in=workload_ids).values_list("quota__group_id", flat=True)
    ) | set(Gang.objects.filter(members__in=workload_ids).values_list("quota__group_id", flat=True))
    lock_shards(groups)
    return groups


def _after_leaving(
    workloads: Sequence[Workload],
    held: Sequence[HeldPlacement],
    group_ids: Iterable[int],
    *,
    refresh_gangs: bool = True,
    delete_home: bool = False,
) -> None:
    """The one ending of every service that takes workloads off their placements (release, cancel,
    requeue, fail, gang timeout), inside its transaction: the backend removes the held placements'
    objects, the gangs' states follow their members (unless the caller sets the gang's state itself),
    observers hear of the workloads, and the shards' cycles run for the capacity freed; all on commit."""
    release_on_backend(held, delete_home=delete_home)
    if refresh_gangs:
        refresh_gang_states(_gangs_touched(workloads))
    observers.notify_on_commit([(w.kind, w.pk) for w in workloads])
    for group_id in sorted(set(group_ids)):
        trigger_cycle(group_id)


@retry_transaction
def release_workload(
    workload_id: int, *, reason: str, delete_home: bool = False, state: str = WorkloadState.RELEASED
) -> Workload:
    """Stop a workload: close its placement, state RELEASED (or `state`: SUCCEEDED/FAILED), backend release
    on commit, observers notified, a cycle triggered for the capacity it freed. Idempotent: a workload
    already finished is returned unchanged (a backend release is still sent when `delete_home`)."""
    w = Workload.objects.filter(pk=workload_id).select_related("quota").first()
    if w is None:
        raise NotFoundError(f"Workload {workload_id} does not exist.")
    with transaction.atomic():
        lock_shard(w.quota.group_id)
        w = Workload.objects.select_for_update().get(pk=workload_id)
        if w.state in TERMINAL_STATES:
            if delete_home:
                release_on_backend([(w, None)], delete_home=True)
            return w
        now = timezone.now()
        held = _finish([w], state=state, reason=reason, now=now)
        if delete_home and not held:
            held = [(w, None)]  # no placement: the home volume still goes
        _after_leaving([w], held, [w.quota.group_id], delete_home=delete_home)
    w.refresh_from_db()
    return w


@retry_transaction
def cancel_gang(gang_id: int, *, reason: str) -> Gang:
    """Cancel a gang job: release every member that is not finished; the gang becomes CANCELLED.
    Locks the shard, then the gang row, then its members' rows in pk order (docs/adr/0002); a lost
    lock race is retried, then raises Busy."""
    gang = Gang.objects.filter(pk=gang_id).select_related("quota").first()
    if gang is None:
        raise NotFoundError(f"Job {gang_id} does not exist.")
    with transaction.atomic():
        lock_shard(gang.quota.group_id)
        gang = Gang.objects.select_for_update().get(pk=gang_id)
        if gang.state in (GangState.CANCELLED, GangState.SUCCEEDED, GangState.FAILED):
            return gang
        now = timezone.now()
        members = list(
            gang.members.select_for_update().exclude(state__in=TERMINAL_STATES).order_by("pk")
        )
        held = _finish(members, state=WorkloadState.RELEASED, reason=reason, now=now)
        if gang.state != GangState.TIMED_OUT:
            Gang.objects.filter(pk=gang.pk).update(
                state=GangState.CANCELLED, reason=reason, updated_at=now
            )
        _after_leaving(members, held, [gang.quota.group_id], refresh_gangs=False)
    gang.refresh_from_db()
    return gang


def requeue_workloads(workload_ids: Iterable[int], *, reason: str, code: str) -> list[int]:
    """Put active workloads back in the queue (PENDING) with `reason`: their placements close, the backend
    removes their objects, observers hear it, cycles run. Used by GPU/node failures, drains, the status
    sync and reclaim. Returns the ids requeued, ascending.

    Gangs are all-or-nothing (quotas.reclaim.with_whole_gangs): every other active member of a gang
    one of them belongs to is requeued with it, in the same transaction, its reason saying which member
    it follows; the gang then gathers again with a fresh deadline (refresh_gang_states). Locks the
    shards (of the workloads and of their gangs), then the workload rows in pk order (docs/adr/0002);
    nested in a caller's transaction that already holds them, it takes them again at no cost."""
    return requeue_each(dict.fromkeys(workload_ids, reason), code=code)


@retry_transaction
def requeue_each(reasons: Mapping[int, str], *, code: str) -> list[int]:
    """`requeue_workloads` with a reason per workload (a reclaim's victims each say why they were
    stopped), all in one transaction: the shards are locked once, the rows move in one UPDATE per
    distinct reason, and one cycle per shard is triggered on commit, however many workloads move."""

    def moving(ids: list[int]) -> tuple[set[int], set[int]]:
        hit, whole = _requeue_set(ids)
        return set(hit), whole

    def requeue(workloads: list[Workload], hit: set[int], now: Any) -> list[HeldPlacement]:
        held = _release_placements(workloads, now)
        recharge_pending([w.pk for w in workloads])
        left = list(workloads)
        for reason in sorted({reasons[i] for i in hit}):
            told: set[int] = set()
            hit_here = {i for i in hit if reasons[i] == reason}
            for why, members in _requeue_reasons(left, hit_here, reason):
                told.update(w.pk for w in members)
                Workload.objects.filter(pk__in=[w.pk for w in members]).update(
                    state=WorkloadState.PENDING,
                    placed_at=None,
                    started_at=None,
                    failure_reason=why,
                    pending_reason=why,
                    pending_code=code,
                    queue_position=None,
                    updated_at=now,
                )
            left = [w for w in left if w.pk not in told]
        return held

    return _take_off(reasons, moving=moving, still=ACTIVE_STATES, leave=requeue)


def _take_off(
    workload_ids: Iterable[int],
    *,
    moving: Callable[[list[int]], tuple[set[int], set[int]]],
    leave: Callable[[list[Workload], set[int], Any], list[HeldPlacement]],
    still: Sequence[str] = (),
    unless: Sequence[str] = (),
) -> list[int]:
    """The one scaffolding of the services that take workloads off the cluster together with the
    gang mates that must go with them (requeue, fail), in one transaction: lock the shards (of the
    workloads and their gangs), ask `moving(ids)` for (the ids the fault hit, every id that moves),
    lock those rows in pk order that are still in `still` (or not in `unless`), `leave(workloads,
    hit, now)` changes them and returns the placements they held, and `_after_leaving` ends it.
    Returns the ids moved, ascending (none: nothing was left to move)."""
    ids = sorted(set(workload_ids))
    if not ids:
        return []
    with transaction.atomic():
        groups = _lock_shards_of(ids)
        hit, whole = moving(ids)
        rows = Workload.objects.select_for_update().filter(pk__in=whole)
        if still:
            rows = rows.filter(state__in=still)
        if unless:
            rows = rows.exclude(state__in=unless)
        workloads = list(rows.order_by("pk"))
        if not workloads:
            return []
        held = leave(workloads, hit, timezone.now())
        _after_leaving(workloads, held, groups)
    return [w.pk for w in workloads]


def _requeue_set(ids: Sequence[int]) -> tuple[dict[int, int | None], set[int]]:
    """The active workloads among `ids` (pk -> gang id) and every active workload requeueing them
    moves: they and their active gang mates."""
    hit: dict[int, int | None] = dict(
        Workload.objects.filter(pk__in=ids, state__in=ACTIVE_STATES).values_list("pk", "gang_id")
    )
    mates = Workload.objects.filter(
        gang_id__in={g for g in hit.values() if g}, state__in=ACTIVE_STATES
    ).values_list("pk", "gang_id")
    return hit, set(with_whole_gangs(hit, [*hit.items(), *mates]))


def workloads_requeued_with(workload_ids: Iterable[int]) -> list[int]:
    """The ids `requeue_workloads(workload_ids)` would requeue now (the active ones and their whole
    gangs), ascending: what an operator's confirmation counts. Reads only; takes no lock."""
    return sorted(_requeue_set(sorted(set(workload_ids)))[1])


def _requeue_reasons(
    workloads: Sequence[Workload], hit: set[int], reason: str
) -> list[tuple[str, list[Workload]]]:
    """`reason` for the workloads the fault hit; for their gang mates, that they follow their gang
    and which member the fault hit."""
    return _reasons_for_followers(
        workloads,
        hit,
        reason,
        lambda cause: (
            f"Requeued with its gang: member {cause.name} was requeued ({reason}) and a gang "
            "runs whole or not at all."
        ),
    )


def _reasons_for_followers(
    workloads: Sequence[Workload],
    hit: set[int],
    reason: str,
    follower_reason: Callable[[Workload], str],
) -> list[tuple[str, list[Workload]]]:
    """Groups `workloads` by the reason they are given: `reason` for those in `hit`, and per gang,
    `follower_reason(first member hit)` for the members that go with them."""
    direct = [w for w in workloads if w.pk in hit]
    out: list[tuple[str, list[Workload]]] = [(reason, direct)] if direct else []
    first_hit: dict[int, Workload] = {}
    for w in direct:
        if w.gang_id:
            first_hit.setdefault(w.gang_id, w)
    followers: dict[int, list[Workload]] = {}
    for w in workloads:
        if w.pk not in hit and w.gang_id and w.gang_id in first_hit:
            followers.setdefault(w.gang_id, []).append(w)
    for gang_id, members in sorted(followers.items()):
        out.append((follower_reason(first_hit[gang_id]), members))
    return out


@retry_transaction
def fail_workloads(workload_ids: Iterable[int], *, reason: str) -> list[int]:
    """Mark unfinished workloads FAILED (a permanent backend error or a pod that failed), releasing
    them. Returns the ids failed, ascending.

    A gang member takes down with it the active members of its gang that can no longer reach
    `min_available` without it (they fail too, their reason naming the member), so the gang fails
    instead of holding placements it cannot use; a gang that still has `min_available` runs on. Locks
    the shards (of the workloads and of their gangs), then the workload rows in pk order."""

    def moving(ids: list[int]) -> tuple[set[int], set[int]]:
        hit = dict(
            Workload.objects.filter(pk__in=ids)
            .exclude(state__in=TERMINAL_STATES)
            .values_list("pk", "gang_id")
        )
        followers = _stranded_mates({g for g in hit.values() if g}, exclude=set(hit))
        return set(hit), {*hit, *followers}

    def fail(workloads: list[Workload], hit: set[int], now: Any) -> list[HeldPlacement]:
        held: list[HeldPlacement] = []
        for why, members in _fail_reasons(workloads, hit, reason):
            held += _finish(members, state=WorkloadState.FAILED, reason=why, now=now)
        return held

    return _take_off(workload_ids, moving=moving, unless=TERMINAL_STATES, leave=fail)


def _stranded_mates(gang_ids: set[int], *, exclude: set[int]) -> list[int]:
    """The active members (outside `exclude`, the ones failing) of those gangs that are left with
    fewer than `min_available` active members: a gang runs with at least that many or not at all."""
    if not gang_ids:
        return []
    mates = list(
        Workload.objects.filter(gang_id__in=gang_ids, state__in=ACTIVE_STATES)
        .exclude(pk__in=exclude)
        .values_list("pk", "gang_id")
    )
    needed = dict(Gang.objects.filter(pk__in=gang_ids).values_list("pk", "min_available"))
    left = Counter(gang_id for _, gang_id in mates)
    return sorted(pk for pk, gang_id in mates if left[gang_id] < needed[gang_id])


def _fail_reasons(
    workloads: Sequence[Workload], hit: set[int], reason: str
) -> list[tuple[str, list[Workload]]]:
    """`reason` for the workloads that failed; for the gang mates failing with them, which member
    failed and why they cannot run on."""
    return _reasons_for_followers(
        workloads,
        hit,
        reason,
        lambda cause: (
            f"Failed with its gang: member {cause.name} failed ({reason}) and the job cannot run "
            "with fewer than its minimum of pods."
        ),
    )


def expire_gangs(
    *, group_id: int | None = None, now: Any = None, failures: ItemFailures | None = None
) -> list[int]:
    """Time out gangs whose deadline passed without `min_available` members placed: release what they
    hold, fail every unfinished member with the reason (which says how many were placed and why the rest
    waited). Returns the ids of the gangs timed out. Run by each cycle and by beat. Each gang is timed
    out on its own (`portal.periodic.run_each`): one that raises is logged and counted in `failures`,
    and the others are still timed out."""
    now = now or timezone.now()
    qs = Gang.objects.filter(state=GangState.WAITING, deadline_at__lte=now)
    if group_id is not None:
        qs = qs.filter(quota__group_id=group_id)
    timed_out: list[int] = []

    def expire(gang: tuple[int, int]) -> None:
        if _expire_gang(gang[0], gang[1], now):
            timed_out.append(gang[0])

    gangs = qs.order_by("pk").values_list("pk", "quota__group_id")
    run_each(gangs, expire, task="gang-timeout", kind="gang", key=lambda g: g[0], failures=failures)
    return timed_out


@retry_transaction
def _expire_gang(gang_id: int, group_id: int, now: Any) -> bool:
    """Time out one gang if, under its shard's lock, it is still gathering past its deadline (it may
    have been placed, or placed and requeued with a fresh deadline, since it was listed)."""
    lock_shard(group_id)
    g = (
        Gang.objects.select_for_update()
        .filter(pk=gang_id, state=GangState.WAITING, deadline_at__lte=now)
        .first()
    )
    if g is None:
        return False
    members = list(g.members.select_for_update().exclude(state__in=TERMINAL_STATES).order_by("pk"))
    active = sum(m.state in ACTIVE_STATES for m in members)
    if active >= g.min_available:
        return False
    blocking = next((m.pending_reason for m in members if m.pending_reason), "")
    reason = (
        f"Job {g.name} timed out after {g.timeout_seconds} s: it needs {g.min_available} of "
        f"{g.members.count()} pods placed together and {active} were; everything it held was "
        f"released. Last reason: {blocking or 'no capacity'}"
    )
    held = _finish(
        members,
        state=WorkloadState.FAILED,
        reason=reason,
        now=now,
        pending_reason=reason,
        pending_code="gang_timeout",
    )
    Gang.objects.filter(pk=g.pk).update(state=GangState.TIMED_OUT, reason=reason, updated_at=now)
    _after_leaving(members, held, [group_id], refresh_gangs=False)
    logger.info("gang %s timed out: %s", g.pk, reason)
    return True
