"""The operators' audit trail: what an operator action will do (`ActionImpact`, shown by its
confirmation and stored with it), the reason rule, recording the action, and reading the log back
(activity log page and API, node page, codespace and job timelines).

Services of every app record their operator actions here, inside the action's own transaction; this
module imports no other app (it sits at the bottom of the layers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet

from portal.choices import OperatorActionKind, OperatorTargetKind
from portal.errors import InvalidInput
from portal.models import OperatorAction, OperatorActionWorkload
from portal.scoping import signed_in_or_none

# An operator's reason (drain, GPU health, ...), shown to the users whose workloads it moves.
MAX_REASON_LENGTH = 500
# What the activity log filters accept.
MAX_FILTER_LENGTH = 150
# Actions whose reason is required: they move or stop other people's work.
REASON_REQUIRED = frozenset(
    {OperatorActionKind.CORDON, OperatorActionKind.DRAIN, OperatorActionKind.GPU_UNHEALTHY}
)


@dataclass(frozen=True)
class ActionImpact:
    """What an action will do (before) or did (after): one sentence for a person, and the facts behind
    it. Computed by the same function for the confirmation and for the action itself: `summary` says
    what will happen (the confirmation, the dry run), `done` the same facts in the past tense (the
    activity log; `summary` when the sentence reads the same before and after)."""

    summary: str
    workload_ids: tuple[int, ...] = ()
    teams: tuple[str, ...] = ()
    codespaces: int = 0
    jobs: int = 0
    details: dict[str, Any] = field(default_factory=dict)
    done: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "workloads": sorted(self.workload_ids),
            "teams": list(self.teams),
            "codespaces": self.codespaces,
            "jobs": self.jobs,
            **self.details,
        }


def clean_reason(raw: Any, *, required: bool) -> str:
    """The reason trimmed; InvalidInput naming `reason` when it is not text, longer than
    MAX_REASON_LENGTH, or (`required`) empty. The one rule for forms, the API and the services."""
    if raw is None:
        raw = ""
    if not isinstance(raw, str):
        message = "Must be text."
        raise InvalidInput(f"reason: {message}", fields={"reason": [message]})
    reason = raw.strip()
    if len(reason) > MAX_REASON_LENGTH:
        message = f"At most {MAX_REASON_LENGTH} characters (got {len(reason)})."
        raise InvalidInput(f"reason: {message}", fields={"reason": [message]})
    if required and not reason:
        message = "A reason is required: it is shown to the people whose work this moves."
        raise InvalidInput(f"reason: {message}", fields={"reason": [message]})
    return reason


def record_operator_action(
    *,
    actor: Any,
    action: str,
    target_kind: str,
    target_id: int | None,
    target_name: str,
    impact: ActionImpact,
    reason: str = "",
    node_name: str = "",
) -> OperatorAction:
    """Append one row to the audit trail (call it inside the action's transaction: no action, no row;
    no row, no action). `actor` is the signed-in user, or None for the system."""
    user = signed_in_or_none(actor)
    entry = OperatorAction.objects.create(
        actor=user,
        actor_name=user.get_username() if user is not None else "",
        action=action,
        target_kind=target_kind,
        target_id=target_id,
        target_name=target_name[:255],
        node_name=node_name,
        reason=reason,
        summary=impact.done or impact.summary,
        impact=impact.as_json(),
    )
    OperatorActionWorkload.objects.bulk_create(
        [
            OperatorActionWorkload(operator_action=entry, workload_id=w)
            for w in sorted(set(impact.workload_ids))
        ]
    )
    return entry


@dataclass(frozen=True)
class LogFilters:
    """The activity log's filters (every one optional): who, what kind, which target (name contains),
    and a time range [since, until)."""

    actor: str = ""
    action: str = ""
    target: str = ""
    since: datetime | None = None
    until: datetime | None = None


def filter_operator_actions(filters: LogFilters) -> QuerySet[OperatorAction]:
    """The audit trail, newest first, narrowed by `filters` (page and API share it)."""
    qs = OperatorAction.objects.select_related("actor").order_by("-created_at", "-id")
    if filters.actor:
        qs = qs.filter(Q(actor_name__iexact=filters.actor))
    if filters.action:
        qs = qs.filter(action=filters.action)
    if filters.target:
        qs = qs.filter(Q(target_name__icontains=filters.target) | Q(node_name=filters.target))
    if filters.since is not None:
        qs = qs.filter(created_at__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(created_at__lt=filters.until)
    return qs


def actions_on_node(node_name: str, *, limit: int = 20) -> list[OperatorAction]:
    """The latest operator actions on a node and its GPUs, newest first."""
    return list(
        OperatorAction.objects.select_related("actor")
        .filter(node_name=node_name)
        .order_by("-created_at", "-id")[:limit]
    )


def actions_on_workloads(
    workload_ids: Iterable[int], *, since: datetime | None = None
) -> list[OperatorAction]:
    """Operator actions that requeued any of `workload_ids` (at or after `since`), newest first."""
    qs = OperatorAction.objects.filter(workloads__workload_id__in=list(workload_ids))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    return list(qs.distinct().order_by("-created_at", "-id"))


def operator_notice(entry: OperatorAction) -> str:
    """How a user whose work an operator moved reads it: who, what, why."""
    who = entry.actor_name or "an operator"
    what = f"{entry.get_action_display().lower()} {entry.target_name}"
    why = f": {entry.reason}" if entry.reason else ""
    return f"Moved by operator {who} ({what}){why}"


def action_choices() -> list[tuple[str, str]]:
    return list(OperatorActionKind.choices)


def target_kind_label(kind: str) -> str:
    return str(OperatorTargetKind(kind).label) if kind in OperatorTargetKind.values else kind
