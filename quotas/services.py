"""Quota and group changes: validated, atomic, audited. The only place that writes quotas.

Every write runs in one transaction that locks the group row, then the quota row (always in that order, so
two edits of sibling quotas cannot both pass the "sum of mins ≤ capacity" check), compares the caller's
`expected_version` with the row (stale → 412 `PreconditionFailed`, via portal.api.concurrency), validates
(`InvalidInput` with `fields`, nothing written), writes with compare-and-set on `version`, and records a
QuotaChange row (who, when, before, after, note, warnings) through `quotas.history`. Callers registered
with `quotas.history.register_quota_change_observer` are told the group id after commit (scheduling
re-runs the group's cycle).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from portal.api.concurrency import version_conflict
from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.errors import Conflict, InvalidInput
from portal.labels import node_label_errors
from portal.models import Tenant, dns_label_validator
from portal.numbers import parse_int
from portal.operator_log import ActionImpact, clean_reason, record_operator_action
from portal.transactions import retry_transaction
from quotas.delete_preview import group_delete_impact, quota_delete_impact, workloads_referencing
from quotas.fairness import MAX_HALF_LIFE_HOURS
from quotas.history import record_change
from quotas.loans import min_below_lent
from quotas.lock_objects import lock_group_selectors
from quotas.models import (
    EDITABLE_GROUP_FIELDS,
    EDITABLE_QUOTA_FIELDS,
    MAX_MIN_RUNTIME_SECONDS,
    RESOURCE_FIELDS,
    ChangeAction,
    Quota,
    QuotaChange,
    QuotaGroup,
    bound_field,
)
from quotas.reclaim_notices import clean_notice_seconds
from quotas.resources import Resources, Side, human_amount
from quotas.selector_preview import selector_conflicts
from quotas.sharing import SharingMode, clean_sharing
from quotas.usage import (
    SIDES,
    GroupCapacity,
    GroupSnapshot,
    QuotaSpec,
    group_capacity,
    group_snapshot,
    matching_nodes,
)

T = TypeVar("T")

MAX_AMOUNT = 10**15
"""Upper bound of any min, max or weight (a million GPUs in milli; far below the 64-bit column limit)."""


@dataclass(frozen=True)
class Saved(Generic[T]):
    """The saved object and the warnings the person should read (e.g. "this will trigger reclaim")."""

    obj: T
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- validation


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return parse_int(value)


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if value in ("true", "True", "1", 1, "on"):
        return True
    if value in ("false", "False", "0", 0, "off", ""):
        return False
    return None


def clean_quota_values(values: dict[str, Any]) -> dict[str, Any]:
    """Type-check and normalise editable quota fields (ints ≥ 0, weight empty or ≥ 0, lend a bool).

    Raises InvalidInput with `fields` for unknown fields and bad values.
    """
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    for name, value in values.items():
        if name in RESOURCE_FIELDS:
            number = _as_int(value)
            if number is None:
                errors[name] = ["Enter a whole number."]
            elif number < 0:
                errors[name] = ["Must be 0 or more (no negatives)."]
            elif number > MAX_AMOUNT:
                errors[name] = [f"At most {MAX_AMOUNT}."]
            else:
                cleaned[name] = number
        elif name == "shared_weight":
            if value in (None, ""):
                cleaned[name] = None
            else:
                number = _as_int(value)
                if number is None or number < 0 or number > MAX_AMOUNT:
                    errors[name] = [
                        f"Enter a whole number from 0 to {MAX_AMOUNT}, or leave empty to use the max."
                    ]
                else:
                    cleaned[name] = number
        elif name == "lend_idle_min":
            flag = _as_bool(value)
            if flag is None:
                errors[name] = ["Must be true or false."]
            else:
                cleaned[name] = flag
        else:
            errors[name] = [f"Unknown or read-only field {name!r}."]
    if errors:
        raise InvalidInput(_summary(errors), fields=errors)
    return cleaned


def _summary(errors: dict[str, list[str]]) -> str:
    name, messages = next(iter(errors.items()))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{name}: {messages[0]}{more}"


def unsaved_quota(base: Quota | None, values: dict[str, Any]) -> Quota:
    """An unsaved Quota: `base`'s editable fields and identity (none for a new quota) with `values`
    (already cleaned) applied; what validation and the what-if preview judge. Nothing written."""
    quota = Quota()
    if base is not None:
        for name in EDITABLE_QUOTA_FIELDS:
            setattr(quota, name, getattr(base, name))
        quota.pk = base.pk
        quota.name = base.name
        quota.tenant_id = base.tenant_id
        quota.group_id = base.group_id
    for name, value in values.items():
        setattr(quota, name, value)
    return quota


def validate_quota(
    group: QuotaGroup,
    quota: Quota,
    *,
    snapshot: GroupSnapshot | None = None,
) -> list[str]:
    """Check an (unsaved or modified) quota against its group; return warnings, raise InvalidInput.

    Errors: min > max; a GPU min below the GPUs the quota lends at once in approved loans
    (`loans.min_below_lent`); the sum of the group's mins above its capacity (unless the group allows
    overcommitted mins). Warnings: a max below current use (that work runs above its runtime share and
    will trigger reclaim when siblings need the capacity), a min below the non-preemptible work running.
    """
    errors: dict[str, list[str]] = {}
    for side in SIDES:
        for dimension in side.dimensions:
            low = int(getattr(quota, bound_field(side, "min", dimension)) or 0)
            high = int(getattr(quota, bound_field(side, "max", dimension)) or 0)
            if low > high:
                errors.setdefault(bound_field(side, "min", dimension), []).append(
                    f"Min {human_amount(dimension, low)} is more than max "
                    f"{human_amount(dimension, high)} ({side.label})."
                )
    lent = min_below_lent(quota)
    if lent:
        errors.setdefault(bound_field(Side.GPU, "min", "gpu_milli"), []).append(lent)
    if errors:
        raise InvalidInput(_summary(errors), fields=errors)

    if snapshot is None:
        snapshot = group_snapshot(group)
    warnings: list[str] = []
    siblings = [s for s in snapshot.specs if s.quota_id != (quota.pk or -1)]
    if not group.allow_overcommitted_min:
        for side in SIDES:
            others = sum((s.min[side] for s in siblings), Resources())
            mins = others + quota.min_of(side)
            capacity = snapshot.capacity.side(side)
            for dimension in side.dimensions:
                if mins.get(dimension) > capacity.get(dimension) and quota.min_of(side).get(
                    dimension
                ):
                    errors.setdefault(bound_field(side, "min", dimension), []).append(
                        f"The {side.label} mins of group {group.name} would add up to "
                        f"{human_amount(dimension, mins.get(dimension))}, more than its capacity of "
                        f"{human_amount(dimension, capacity.get(dimension))} (the other quotas hold "
                        f"{human_amount(dimension, others.get(dimension))}). Lower the min, or allow "
                        "overcommitted mins on the group."
                    )
    if errors:
        raise InvalidInput(_summary(errors), fields=errors)

    if quota.pk and quota.pk in snapshot.quotas:
        state = snapshot.quota(quota.pk)
        for side in SIDES:
            usage = state.side(side)
            new_max = quota.max_of(side)
            new_min = quota.min_of(side)
            for dimension in side.dimensions:
                used = usage.used.get(dimension)
                if used > new_max.get(dimension):
                    warnings.append(
                        f"{quota.name} {side.label} uses {human_amount(dimension, used)}, more than "
                        f"the new max of {human_amount(dimension, new_max.get(dimension))}: this will "
                        f"trigger reclaim — "
                        f"{human_amount(dimension, used - new_max.get(dimension))} runs above its "
                        "runtime share and is stopped (preemptible work, whole gangs) when other "
                        "quotas need the capacity; new work waits until use is below the max."
                    )
                held = usage.nonpreemptible_used.get(dimension)
                if held > new_min.get(dimension):
                    warnings.append(
                        f"{quota.name} {side.label}: non-preemptible work holds "
                        f"{human_amount(dimension, held)}, more than the new min of "
                        f"{human_amount(dimension, new_min.get(dimension))}; it keeps running (it is "
                        "never reclaimed) but no more non-preemptible work starts."
                    )
    return warnings


def _lock_group(group_id: int) -> QuotaGroup:
    """Row-lock the group (the first row lock of a quota change, docs/adr/0002). FOR NO KEY UPDATE:
    it serializes the group's quota edits without blocking the foreign-key checks of rows that
    reference the group (telemetry samples, workloads), which would deadlock with them."""
    return QuotaGroup.objects.select_for_update(no_key=True).get(pk=group_id)


def _quota_gone(quota_id: int) -> Conflict:
    return Conflict(f"Quota {quota_id} no longer exists; someone deleted it.", code="gone")


def _group_id_of_quota(quota_id: int) -> int:
    """The group of the quota, read before locking it (the lock order); gone when it was deleted."""
    group_id = Quota.objects.filter(pk=quota_id).values_list("group_id", flat=True).first()
    if group_id is None:
        raise _quota_gone(quota_id)
    return int(group_id)


def _lock_quota(quota_id: int) -> Quota:
    """Row-lock the quota row only (`of=("self",)`: its tenant and group come along unlocked; the
    group is locked before, by `_lock_group`), FOR NO KEY UPDATE like `_lock_group`."""
    try:
        return (
            Quota.objects.select_for_update(of=("self",), no_key=True)
            .select_related("tenant", "group")
            .get(pk=quota_id)
        )
    except Quota.DoesNotExist as exc:
        raise _quota_gone(quota_id) from exc


def _check_version(current: int, expected: int | None) -> None:
    if expected is not None and int(expected) != int(current):
        raise version_conflict(current)


def _audit(
    *,
    action: str,
    subject: Quota | QuotaGroup,
    actor: Any,
    before: dict[str, Any] | None,
    note: str = "",
    warnings: Sequence[str] = (),
) -> QuotaChange:
    """The one ending of every quota and group change, inside its transaction (`quotas.history`): the
    history row (who, why, before and after, the version, the warnings shown) and, after commit, the
    change observers of the group (none for a deleted group: nothing is left to schedule)."""
    deleted = action == ChangeAction.DELETED
    if isinstance(subject, Quota):
        group: QuotaGroup | None = subject.group
        assert group is not None
        names: dict[str, Any] = {
            "group": group,
            "quota": subject,
            "subject": "quota",
            "subject_name": f"{group.name}/{subject.name}",
            "tenant": subject.tenant,
        }
    else:
        group = None if deleted else subject
        names = {
            "group": group,
            "quota": None,
            "subject": "group",
            "subject_name": subject.name,
            "tenant": None,
        }
    return record_change(
        action=action,
        actor=actor,
        before=before,
        after=None if deleted else subject.snapshot_fields(),
        version=subject.version,
        note=note,
        warnings=warnings,
        reschedule=True,
        **names,
    )


def _delete_audited(
    locked: Quota | QuotaGroup,
    *,
    actor: Any,
    note: str,
    action: str,
    target_kind: str,
    target_name: str,
    impact: ActionImpact,
) -> None:
    """Delete a locked quota or group, audited twice in its transaction: its history row (it keeps its
    name) and the operators' activity log (the confirmation's impact sentence and the reason)."""
    _audit(
        action=ChangeAction.DELETED,
        subject=locked,
        actor=actor,
        before=locked.snapshot_fields(),
        note=note,
    )
    record_operator_action(
        actor=actor,
        action=action,
        target_kind=target_kind,
        target_id=locked.pk,
        target_name=target_name,
        impact=impact,
        reason=note,
    )
    locked.delete()


# ---------------------------------------------------------------------------------------------- quotas


@retry_transaction
def create_quota(
    *,
    group: QuotaGroup,
    tenant: Tenant,
    name: str | None = None,
    actor: Any = None,
    note: str = "",
    **values: Any,
) -> Saved[Quota]:
    """Create a tenant's quota in `group` (one per tenant and group). Locks the group row; audited.

    Raises InvalidInput (bad name, second quota of the tenant in the group, min > max, mins above capacity).
    """
    name = (name or tenant.slug).strip()
    cleaned = clean_quota_values(values)
    errors: dict[str, list[str]] = {}
    try:
        dns_label_validator(name)
    except ValidationError as exc:
        errors["name"] = [str(m) for m in exc.messages]
    if errors:
        raise InvalidInput(_summary(errors), fields=errors)
    with transaction.atomic():
        group = _lock_group(group.pk)
        if Quota.objects.filter(group=group, name=name).exists():
            errors["name"] = [f"Group {group.name} already has a quota named {name}."]
        if Quota.objects.filter(group=group, tenant=tenant).exists():
            errors["tenant"] = [
                f"{tenant.slug} already holds a quota in group {group.name} (one per group)."
            ]
        if errors:
            raise InvalidInput(_summary(errors), fields=errors)
        quota = unsaved_quota(None, cleaned)
        quota.group = group
        quota.tenant = tenant
        quota.name = name
        warnings = validate_quota(group, quota)
        try:
            with transaction.atomic():
                quota.save()
        except IntegrityError as exc:
            raise InvalidInput(
                f"Group {group.name} already has this quota.", fields={"name": [str(exc)]}
            ) from exc
        _audit(
            action=ChangeAction.CREATED,
            subject=quota,
            actor=actor,
            before=None,
            note=note,
            warnings=warnings,
        )
    return Saved(quota, warnings)


@retry_transaction
def update_quota(
    quota: Quota | int,
    *,
    expected_version: int | None,
    actor: Any = None,
    note: str = "",
    **changes: Any,
) -> Saved[Quota]:
    """Change a quota's bounds, weight or lending. Compare-and-set on `version`; audited.

    `expected_version`: the version the caller read (None only for internal callers that re-read under the
    lock). Raises PreconditionFailed (412) when stale, InvalidInput (nothing changed) when invalid.
    """
    quota_id = quota if isinstance(quota, int) else quota.pk
    cleaned = clean_quota_values(changes)
    with transaction.atomic():
        group = _lock_group(_group_id_of_quota(quota_id))
        locked = _lock_quota(quota_id)
        _check_version(locked.version, expected_version)
        before = locked.snapshot_fields()
        proposed = unsaved_quota(locked, cleaned)
        warnings = validate_quota(group, proposed)
        updated = Quota.objects.filter(pk=quota_id, version=locked.version).update(
            **cleaned, version=F("version") + 1, updated_at=timezone.now()
        )
        if updated != 1:  # pragma: no cover - the row lock makes this unreachable on PostgreSQL
            raise version_conflict(Quota.objects.get(pk=quota_id).version)
        saved = Quota.objects.select_related("group", "tenant").get(pk=quota_id)
        _audit(
            action=ChangeAction.UPDATED,
            subject=saved,
            actor=actor,
            before=before,
            note=note,
            warnings=warnings,
        )
    return Saved(saved, warnings)


@retry_transaction
def delete_quota(
    quota: Quota | int, *, expected_version: int | None, actor: Any = None, note: str = ""
) -> None:
    """Delete a quota that no workload references. Audited twice: the quota's history row (it keeps
    its name) and the operators' activity log (the confirmation's impact sentence and the reason, the
    `note`: optional, bounded like every operator reason)."""
    quota_id = quota if isinstance(quota, int) else quota.pk
    note = clean_reason(note, required=False)
    with transaction.atomic():
        _lock_group(
            _group_id_of_quota(quota_id)
        )  # the lock order: group row, then quota row (docs/adr)
        locked = _lock_quota(quota_id)
        _check_version(locked.version, expected_version)
        referencing = workloads_referencing(locked)
        if referencing:
            raise Conflict(
                f"{referencing} workload(s) still reference quota {locked.name} (running, waiting or "
                "finished); set its max to 0 to stop new work instead.",
                code="quota_in_use",
            )
        _delete_audited(
            locked,
            actor=actor,
            note=note,
            action=OperatorActionKind.QUOTA_DELETE,
            target_kind=OperatorTargetKind.QUOTA,
            target_name=f"{locked.group.name}/{locked.name}",
            impact=quota_delete_impact(locked),
        )


# ---------------------------------------------------------------------------------------------- groups


def _clean_selector(value: Any) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str | int) for k, v in value.items()
    ):
        raise InvalidInput(
            'node_selector: use an object of label: value strings, e.g. {"pool": "training"}.',
            fields={
                "node_selector": [
                    'Use an object of label: value strings, e.g. {"pool": "training"}.'
                ]
            },
        )
    selector = {str(k): str(v) for k, v in value.items()}
    errors = node_label_errors(selector)
    if errors:
        raise InvalidInput(f"node_selector: {errors[0]}", fields={"node_selector": errors})
    return selector


def _check_selector_is_disjoint(selector: dict[str, str], group_pk: int | None = None) -> None:
    """Refuse a selector that could match a node another group matches (docs/quotas.md "Groups never
    share a node"): it gives no shared key a different value. Names the groups, and the nodes both match
    now. Call with `lock_group_selectors()` held."""
    conflicts = selector_conflicts(selector, group_pk)
    if not conflicts:
        return
    groups = ", ".join(f"{c.group} {json.dumps(c.selector, sort_keys=True)}" for c in conflicts)
    shared = sorted({node for c in conflicts for node in c.nodes})
    now = (
        f"both match {', '.join(shared[:10])}{' …' if len(shared) > 10 else ''} now"
        if shared
        else "a node carrying both sets of labels would match both"
    )
    message = (
        f"Selector {json.dumps(selector, sort_keys=True)} can match the same nodes as group {groups} "
        f"({now}); a node belongs to one group only: add a label value that tells them apart."
    )
    raise InvalidInput(f"node_selector: {message}", fields={"node_selector": [message]})


def _check_group_mins(group: QuotaGroup, capacity: GroupCapacity, field_name: str) -> None:
    if group.allow_overcommitted_min or not group.pk:
        return
    specs = [QuotaSpec.of(q) for q in group.quotas.select_related("tenant")]
    for side in SIDES:
        mins = sum((s.min[side] for s in specs), Resources())
        for dimension in side.dimensions:
            if mins.get(dimension) > capacity.side(side).get(dimension):
                message = (
                    f"The {side.label} mins of the group's quotas add up to "
                    f"{human_amount(dimension, mins.get(dimension))}, more than the capacity this would "
                    f"leave ({human_amount(dimension, capacity.side(side).get(dimension))})."
                )
                raise InvalidInput(message, fields={field_name: [message]})


@retry_transaction
def create_group(
    *,
    name: str,
    description: str = "",
    node_selector: dict[str, Any] | None = None,
    allow_overcommitted_min: bool = False,
    sharing_mode: str = SharingMode.SLICE,
    mig_profiles: Any = (),
    timeslice_replicas: Any = 1,
    fair_share_half_life_hours: Any = None,
    min_runtime_seconds: Any = 0,
    reclaim_notice_seconds: Any = 0,
    actor: Any = None,
    note: str = "",
) -> Saved[QuotaGroup]:
    """Create a quota group (a node pool selected by labels, with its GPU sharing mode). Audited. One
    transaction, retried when it lost a lock race (Busy when every attempt did)."""
    half_life = clean_half_life(fair_share_half_life_hours)
    min_runtime = clean_min_runtime(min_runtime_seconds)
    notice_seconds = clean_notice_seconds(reclaim_notice_seconds)
    errors: dict[str, list[str]] = {}
    try:
        dns_label_validator(name)
    except ValidationError as exc:
        errors["name"] = [str(m) for m in exc.messages]
    sharing, sharing_errors = clean_sharing(sharing_mode, mig_profiles, timeslice_replicas)
    errors.update(sharing_errors)
    selector = _clean_selector(node_selector)
    if not errors and QuotaGroup.objects.filter(name=name).exists():
        errors["name"] = [f"A group named {name} already exists."]
    if errors:
        raise InvalidInput(_summary(errors), fields=errors)
    with transaction.atomic():
        lock_group_selectors()
        _check_selector_is_disjoint(selector)
        try:
            with transaction.atomic():
                group = QuotaGroup.objects.create(
                    name=name,
                    description=description,
                    node_selector=selector,
                    allow_overcommitted_min=bool(allow_overcommitted_min),
                    fair_share_half_life_hours=half_life,
                    min_runtime_seconds=min_runtime,
                    reclaim_notice_seconds=notice_seconds,
                    sharing_mode=sharing.mode if sharing else SharingMode.SLICE,
                    mig_profiles=list(sharing.mig_profiles) if sharing else [],
                    timeslice_replicas=sharing.timeslice_replicas if sharing else 1,
                )
        except IntegrityError as exc:
            raise InvalidInput(
                f"A group named {name} already exists.",
                fields={"name": [f"A group named {name} already exists."]},
            ) from exc
        warnings = []
        if not matching_nodes(group):
            warnings.append(
                f"No node matches {selector or 'the empty selector'} yet: capacity is 0."
            )
        _audit(
            action=ChangeAction.CREATED,
            subject=group,
            actor=actor,
            before=None,
            note=note,
            warnings=warnings,
        )
    return Saved(group, warnings)


SHARING_FIELDS = frozenset({"sharing_mode", "mig_profiles", "timeslice_replicas"})


def _clean_group_sharing(group: QuotaGroup, changes: dict[str, Any]) -> dict[str, Any]:
    """The group's sharing fields after ``changes``, validated together (a mode needs its parameters)."""
    sharing, errors = clean_sharing(
        changes.get("sharing_mode", group.sharing_mode),
        changes.get("mig_profiles", group.mig_profiles),
        changes.get("timeslice_replicas", group.timeslice_replicas),
    )
    if sharing is None:
        raise InvalidInput(_summary(errors), fields=errors)
    return {
        "sharing_mode": sharing.mode,
        "mig_profiles": list(sharing.mig_profiles),
        "timeslice_replicas": sharing.timeslice_replicas,
    }


@retry_transaction
def update_group(
    group: QuotaGroup | int,
    *,
    expected_version: int | None,
    actor: Any = None,
    note: str = "",
    **changes: Any,
) -> Saved[QuotaGroup]:
    """Change a group's description, node selector, overcommit flag or sharing mode (``sharing_mode``,
    ``mig_profiles``, ``timeslice_replicas``, validated together). Compare-and-set; audited.

    Refuses (InvalidInput) a selector or flag change that would leave the quotas' mins above capacity.
    One transaction, retried when it lost a lock race (Busy when every attempt did).
    """
    group_id = group if isinstance(group, int) else group.pk
    unknown = [k for k in changes if k not in EDITABLE_GROUP_FIELDS]
    if unknown:
        errors = {k: [f"Unknown or read-only field {k!r}."] for k in unknown}
        raise InvalidInput(_summary(errors), fields=errors)
    cleaned = dict(changes)
    if "node_selector" in cleaned:
        cleaned["node_selector"] = _clean_selector(cleaned["node_selector"])
    if "allow_overcommitted_min" in cleaned:
        flag = _as_bool(cleaned["allow_overcommitted_min"])
        if flag is None:
            raise InvalidInput(
                "allow_overcommitted_min: must be true or false.",
                fields={"allow_overcommitted_min": ["Must be true or false."]},
            )
        cleaned["allow_overcommitted_min"] = flag
    if "description" in cleaned:
        cleaned["description"] = str(cleaned["description"] or "")
    if "fair_share_half_life_hours" in cleaned:
        cleaned["fair_share_half_life_hours"] = clean_half_life(
            cleaned["fair_share_half_life_hours"]
        )
    if "min_runtime_seconds" in cleaned:
        cleaned["min_runtime_seconds"] = clean_min_runtime(cleaned["min_runtime_seconds"])
    if "reclaim_notice_seconds" in cleaned:
        cleaned["reclaim_notice_seconds"] = clean_notice_seconds(cleaned["reclaim_notice_seconds"])
    with transaction.atomic():
        if "node_selector" in cleaned:
            lock_group_selectors()  # advisory lock first, then the group row
            _check_selector_is_disjoint(cleaned["node_selector"], group_id)
        locked = _lock_group(group_id)
        _check_version(locked.version, expected_version)
        if SHARING_FIELDS & cleaned.keys():
            cleaned.update(_clean_group_sharing(locked, cleaned))
        before = locked.snapshot_fields()
        for key, value in cleaned.items():
            setattr(locked, key, value)
        _check_group_mins(
            locked,
            group_capacity(locked),
            "node_selector" if "node_selector" in cleaned else "allow_overcommitted_min",
        )
        QuotaGroup.objects.filter(pk=group_id, version=locked.version).update(
            **cleaned, version=F("version") + 1, updated_at=timezone.now()
        )
        saved = QuotaGroup.objects.get(pk=group_id)
        _audit(
            action=ChangeAction.UPDATED,
            subject=saved,
            actor=actor,
            before=before,
            note=note,
        )
    return Saved(saved, [])


def clean_half_life(value: Any) -> int | None:
    """The decayed fair share half-life in hours: empty/None/0 = off, else 1..MAX_HALF_LIFE_HOURS.
    InvalidInput naming `fair_share_half_life_hours` otherwise."""
    if value in (None, "", 0, "0"):
        return None
    number = _as_int(value)
    if number is None or not 1 <= number <= MAX_HALF_LIFE_HOURS:
        message = f"A whole number of hours from 1 to {MAX_HALF_LIFE_HOURS} (empty = off)."
        raise InvalidInput(
            f"fair_share_half_life_hours: {message}",
            fields={"fair_share_half_life_hours": [message]},
        )
    return number


def clean_min_runtime(value: Any) -> int:
    """Minimum runtime before preemption in seconds: 0 (off) to MAX_MIN_RUNTIME_SECONDS."""
    number = 0 if value in (None, "") else _as_int(value)
    if number is None or not 0 <= number <= MAX_MIN_RUNTIME_SECONDS:
        message = f"A whole number of seconds from 0 (off) to {MAX_MIN_RUNTIME_SECONDS}."
        raise InvalidInput(
            f"min_runtime_seconds: {message}", fields={"min_runtime_seconds": [message]}
        )
    return number


@retry_transaction
def delete_group(
    group: QuotaGroup | int,
    *,
    expected_version: int | None,
    actor: Any = None,
    reason: str = "",
) -> None:
    """Delete an empty group (no quotas). Audited in the group's history and the operators' activity
    log (impact sentence, optional bounded reason). One transaction, retried when it lost a lock race
    (Busy when every attempt did)."""
    group_id = group if isinstance(group, int) else group.pk
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        locked = _lock_group(group_id)
        _check_version(locked.version, expected_version)
        count = locked.quotas.count()
        if count:
            raise Conflict(
                f"Group {locked.name} still has {count} quota(s); delete them first.",
                code="group_in_use",
            )
        # the scheduling shard row goes with it (on_delete=CASCADE on its side)
        _delete_audited(
            locked,
            actor=actor,
            note=reason,
            action=OperatorActionKind.QUOTA_GROUP_DELETE,
            target_kind=OperatorTargetKind.QUOTA_GROUP,
            target_name=locked.name,
            impact=group_delete_impact(locked),
        )


# --------------------------------------------------------------------------------------------- what-if


@dataclass(frozen=True)
class WhatIfRow:
    """One sibling's runtime share before and after a proposed change, for the current demand."""

    quota_id: int | None
    name: str
    tenant: str
    is_target: bool
    gpu_demand: Resources
    cpu_demand: Resources
    gpu_before: Resources
    gpu_after: Resources
    cpu_before: Resources
    cpu_after: Resources

    def side(self, side: Side) -> tuple[Resources, Resources]:
        if side is Side.GPU:
            return self.gpu_before, self.gpu_after
        return self.cpu_before, self.cpu_after

    @property
    def changed(self) -> bool:
        return self.gpu_before != self.gpu_after or self.cpu_before != self.cpu_after


def what_if(
    group: QuotaGroup,
    quota: Quota | None,
    proposed: dict[str, Any],
    *,
    tenant: Tenant | None = None,
    name: str | None = None,
) -> list[WhatIfRow]:
    """Every quota's runtime share in `group` before and after applying `proposed` to `quota` (or adding a
    new quota for `tenant` named `name` when `quota` is None), for the current demand. Writes nothing.

    Raises InvalidInput when the proposal is invalid (same checks as the save).
    """
    cleaned = clean_quota_values(proposed)
    snapshot = group_snapshot(group)
    candidate = unsaved_quota(quota, cleaned)
    if quota is None:
        if tenant is None:
            raise InvalidInput("Choose a tenant.", fields={"tenant": ["Choose a tenant."]})
        candidate.tenant = tenant
        candidate.group = group
        candidate.name = name or tenant.slug
    else:
        candidate.tenant = quota.tenant
    validate_quota(group, candidate, snapshot=snapshot)
    spec = QuotaSpec.of(candidate)
    after = snapshot.with_spec(spec)
    rows = []
    names = sorted({s.name for s in snapshot.specs} | {spec.name})
    for quota_name in names:
        old = next((q for q in snapshot.quotas.values() if q.name == quota_name), None)
        new = after.by_name(quota_name)
        rows.append(
            WhatIfRow(
                quota_id=new.quota_id or None,
                name=quota_name,
                tenant=new.spec.tenant_slug,
                is_target=quota_name == spec.name,
                gpu_demand=new.gpu.demand,
                cpu_demand=new.cpu.demand,
                gpu_before=old.gpu.runtime if old else Resources(),
                gpu_after=new.gpu.runtime,
                cpu_before=old.cpu.runtime if old else Resources(),
                cpu_after=new.cpu.runtime,
            )
        )
    return rows
