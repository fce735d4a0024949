"""The reclaim-notices board: every group's reclaim plan (what, whose, when) in one list (issue 17).

Polite reclaim (`quotas.reclaim_notices`) keeps one `ReclaimNotice` row per workload given notice. The quota
page shows the notices of one quota; this board shows them across groups, for a viewer:

- platform operators (`portal.scoping.is_operator`) see every notice;
- anyone else sees the notices that concern a quota of a team they belong to
  (`portal.scoping.tenant_ids_for`): their work given notice, and other teams' work stopped for them, as
  the quota page shows both;
- nobody else sees anything.

Filters (`board_query`, the one parser of the page, the API and the CLI; InvalidInput names the field):
`state` (live = noticed and not closed yet, closed = executed or cancelled, all), `group` (a name or an id
the viewer may see), `quota` (an id the viewer may see), `limit` (1 to MAX_BOARD_LIMIT) and `cursor` (a position in the
board: the page after it, or with `backward` the page before it).

Order: live notices first, soonest deadline first; then closed ones, newest closed first; the id breaks
ties. Pages are keyset pages on that order (`BoardPosition`), stable while notices come and go.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.units import MILLI_PER_GPU
from portal.errors import InvalidInput
from portal.numbers import parse_int
from portal.scoping import is_operator, tenant_ids_for
from quotas.models import DeliveryState, Quota, QuotaGroup, ReclaimNotice, ReclaimNoticeState
from quotas.reclaim_notices import notice_json
from quotas.usage import live_gpu_milli

DEFAULT_BOARD_LIMIT = 50
MAX_BOARD_LIMIT = 500
MAX_FILTER_LENGTH = 100
MAX_CURSOR_LENGTH = 200


class BoardState(StrEnum):
    LIVE = "live"
    CLOSED = "closed"
    ALL = "all"


STATE_CHOICES = [
    (BoardState.ALL.value, "All"),
    (BoardState.LIVE.value, "Live (noticed, not closed)"),
    (BoardState.CLOSED.value, "Closed (executed or cancelled)"),
]

_LIVE = Q(state=ReclaimNoticeState.NOTICED, closed_at__isnull=True)


@dataclass(frozen=True, slots=True)
class BoardPosition:
    """A row's place in the board: its segment (live or closed), its sort time (the deadline of a
    live notice, the close time of a closed one) and its id. As a cursor, `backward` says whether
    the page wanted is the one before the row (previous) or after it (next)."""

    live: bool
    at: datetime
    notice_id: int
    backward: bool = False

    def encode(self) -> str:
        segment = ("l" if self.live else "c") + ("-" if self.backward else "")
        raw = f"{segment}|{self.at.isoformat()}|{self.notice_id}"
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> BoardPosition:
        """The position a cursor names; InvalidInput naming `cursor` for anything else."""
        refused = InvalidInput.for_field("cursor", "Not a cursor of this list: start again.")
        if len(text) > MAX_CURSOR_LENGTH:
            raise refused
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise refused from exc
        parts = raw.split("|")
        if len(parts) != 3 or parts[0] not in ("l", "c", "l-", "c-"):
            raise refused
        try:
            at = parse_datetime(parts[1])
        except ValueError as exc:
            raise refused from exc
        notice_id = parse_int(parts[2], minimum=1)
        if at is None or at.tzinfo is None or notice_id is None:
            raise refused
        return cls(parts[0].startswith("l"), at, notice_id, parts[0].endswith("-"))


@dataclass(frozen=True, slots=True)
class BoardQuery:
    """Validated filters of the board (build with `board_query`)."""

    state: BoardState = BoardState.ALL
    group: QuotaGroup | None = None
    quota: Quota | None = None
    limit: int = DEFAULT_BOARD_LIMIT
    cursor: BoardPosition | None = None


@dataclass(frozen=True, slots=True)
class BoardPage:
    """One page of the board: the notices as `notice_json` rows, and the cursors of the next and the
    previous page (None on the last and the first page)."""

    rows: list[dict[str, Any]]
    next_position: BoardPosition | None
    previous_position: BoardPosition | None = None


def visible_notices(viewer: Any) -> QuerySet[ReclaimNotice]:
    """The notices `viewer` may see: all for operators; for anyone else those of a quota of one of
    their teams (given notice, or claimant); none for the anonymous."""
    rows = ReclaimNotice.objects.select_related("group", "quota", "claimant_quota")
    if is_operator(viewer):
        return rows
    tenants = tenant_ids_for(viewer)
    if not tenants:
        return rows.none()
    return rows.filter(Q(quota__tenant_id__in=tenants) | Q(claimant_quota__tenant_id__in=tenants))


def _visible_groups(viewer: Any) -> QuerySet[QuotaGroup]:
    if is_operator(viewer):
        return QuotaGroup.objects.all()
    return QuotaGroup.objects.filter(quotas__tenant_id__in=tenant_ids_for(viewer)).distinct()


def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise InvalidInput.for_field(field, "A text value.")
    if len(value) > MAX_FILTER_LENGTH:
        raise InvalidInput.for_field(field, f"At most {MAX_FILTER_LENGTH} characters.")
    return value.strip()


def board_query(
    viewer: Any,
    *,
    state: Any = "",
    group: Any = "",
    quota: Any = "",
    limit: Any = "",
    cursor: Any = "",
) -> BoardQuery:
    """Parse the board's filters as typed (query parameters, form fields or CLI flags). A group is
    named by its name or its id, a quota by its id; one the viewer may not see is unknown, as one that
    does not exist. Raises InvalidInput naming every field at fault."""
    errors: dict[str, list[str]] = {}

    def refuse(error: InvalidInput) -> None:
        for name, problems in error.fields.items():
            errors.setdefault(name, []).extend(problems)

    parsed_state = BoardState.ALL
    try:
        raw_state = _text(state, "state")
        if raw_state:
            if raw_state not in BoardState.__members__.values():
                raise InvalidInput.for_field(
                    "state", f"One of {', '.join(s.value for s in BoardState)}."
                )
            parsed_state = BoardState(raw_state)
    except InvalidInput as error:
        refuse(error)

    found_group: QuotaGroup | None = None
    try:
        raw_group = _text(group, "group")
        if raw_group:
            groups = _visible_groups(viewer)
            group_id = parse_int(raw_group, minimum=1)
            found_group = (
                groups.filter(pk=group_id).first()
                if group_id is not None
                else groups.filter(name=raw_group).first()
            )
            if found_group is None:
                raise InvalidInput.for_field("group", f"Unknown group {raw_group[:63]!r}.")
    except InvalidInput as error:
        refuse(error)

    found_quota: Quota | None = None
    try:
        raw_quota = _text(quota, "quota")
        if raw_quota:
            quota_id = parse_int(raw_quota, minimum=1)
            if quota_id is None:
                raise InvalidInput.for_field("quota", "A quota id (a whole number from 1).")
            quotas = Quota.objects.select_related("group")
            if not is_operator(viewer):
                quotas = quotas.filter(tenant_id__in=tenant_ids_for(viewer))
            found_quota = quotas.filter(pk=quota_id).first()
            if found_quota is None:
                raise InvalidInput.for_field("quota", f"Unknown quota {quota_id}.")
    except InvalidInput as error:
        refuse(error)

    parsed_limit = DEFAULT_BOARD_LIMIT
    try:
        raw_limit = _text(limit, "limit")
        if raw_limit:
            number = parse_int(raw_limit, minimum=1, maximum=MAX_BOARD_LIMIT)
            if number is None:
                raise InvalidInput.for_field(
                    "limit", f"A whole number from 1 to {MAX_BOARD_LIMIT}."
                )
            parsed_limit = number
    except InvalidInput as error:
        refuse(error)

    position: BoardPosition | None = None
    try:
        raw_cursor = cursor if isinstance(cursor, str) else ""
        if cursor and not raw_cursor:
            raise InvalidInput.for_field("cursor", "Not a cursor of this list: start again.")
        if raw_cursor:
            position = BoardPosition.decode(raw_cursor)
    except InvalidInput as error:
        refuse(error)

    if errors:
        raise InvalidInput(
            "; ".join(f"{name}: {problems[0]}" for name, problems in errors.items()),
            fields=errors,
        )
    return BoardQuery(parsed_state, found_group, found_quota, parsed_limit, position)


def _filtered(viewer: Any, query: BoardQuery) -> QuerySet[ReclaimNotice]:
    rows = visible_notices(viewer)
    if query.group is not None:
        rows = rows.filter(group=query.group)
    if query.quota is not None:
        rows = rows.filter(Q(quota=query.quota) | Q(claimant_quota=query.quota))
    return rows


def _is_live(notice: ReclaimNotice) -> bool:
    return notice.state == ReclaimNoticeState.NOTICED and notice.closed_at is None


def _position(notice: ReclaimNotice, *, backward: bool) -> BoardPosition:
    live = _is_live(notice)
    at = notice.deadline if live else (notice.closed_at or notice.noticed_at)
    return BoardPosition(live, at, notice.pk, backward)


def _after(
    rows: QuerySet[Any], key: str, cursor: BoardPosition | None, *, ascending: bool, backward: bool
) -> QuerySet[Any]:
    """`rows` after `cursor` in the order (`key`, id) — ascending or descending — or before it
    nearest first when `backward`: one keyset walk for both segments of the board."""
    up = ascending != backward
    if cursor is not None:
        op = "gt" if up else "lt"
        rows = rows.filter(
            Q(**{f"{key}__{op}": cursor.at}) | Q(**{key: cursor.at, f"pk__{op}": cursor.notice_id})
        )
    return rows.order_by(key, "pk") if up else rows.order_by(f"-{key}", "-pk")


def _live_rows(
    rows: QuerySet[ReclaimNotice], cursor: BoardPosition | None, *, backward: bool = False
) -> QuerySet[Any]:
    """Live notices after `cursor` in board order (deadline, id), or before it nearest first."""
    return _after(rows.filter(_LIVE), "deadline", cursor, ascending=True, backward=backward)


def _closed_rows(
    rows: QuerySet[ReclaimNotice], cursor: BoardPosition | None, *, backward: bool = False
) -> QuerySet[Any]:
    """Closed notices after `cursor` in board order (newest closed first, then the higher id), or
    before it nearest first."""
    closed = rows.exclude(_LIVE).annotate(closed_key=Coalesce("closed_at", "noticed_at"))
    return _after(closed, "closed_key", cursor, ascending=False, backward=backward)


def _forward(rows: QuerySet[ReclaimNotice], query: BoardQuery, want: int) -> list[ReclaimNotice]:
    after = query.cursor
    picked: list[ReclaimNotice] = []
    if query.state != BoardState.CLOSED and (after is None or after.live):
        picked = list(_live_rows(rows, after)[:want])
    if query.state != BoardState.LIVE and len(picked) < want:
        # After the live segment (or a live cursor) the closed one starts from its beginning.
        start = None if after is None or after.live else after
        picked += list(_closed_rows(rows, start)[: want - len(picked)])
    return picked


def _backward(rows: QuerySet[ReclaimNotice], query: BoardQuery, want: int) -> list[ReclaimNotice]:
    """The rows before the cursor, nearest first (the caller reverses them)."""
    before = query.cursor
    assert before is not None
    picked: list[ReclaimNotice] = []
    if query.state != BoardState.LIVE and not before.live:
        picked = list(_closed_rows(rows, before, backward=True)[:want])
    if query.state != BoardState.CLOSED and len(picked) < want:
        # Before the closed segment (or a closed cursor) come all live notices, the last first.
        start = before if before.live else None
        picked += list(_live_rows(rows, start, backward=True)[: want - len(picked)])
    return picked


def board_page(viewer: Any, query: BoardQuery, *, now: datetime | None = None) -> BoardPage:
    """One page of the notices `viewer` may see, filtered by `query`, in board order (live by
    deadline, then closed newest first), at most `query.limit` rows: the first page, the one after
    `query.cursor`, or the one before it when the cursor is `backward`."""
    now = now or timezone.now()
    rows = _filtered(viewer, query)
    want = query.limit + 1  # one more than shown: is there another page that way?
    if query.cursor is not None and query.cursor.backward:
        picked = _backward(rows, query, want)
        shown = list(reversed(picked[: query.limit]))
        more_before, more_after = len(picked) > query.limit, True
    else:
        picked = _forward(rows, query, want)
        shown = picked[: query.limit]
        more_before, more_after = query.cursor is not None, len(picked) > query.limit
    following = _position(shown[-1], backward=False) if shown and more_after else None
    previous = _position(shown[0], backward=True) if shown and more_before else None
    return BoardPage([notice_json(n, now) for n in shown], following, previous)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """The live reclaim plan of one group: how many notices, workloads and GPUs are under notice,
    the soonest deadline and how many deliveries (signal or checkpoint hook) failed."""

    group_id: int
    group: str
    live_notices: int
    workloads: int
    gpu_milli: int
    soonest_deadline: datetime | None
    delivery_failures: int

    def as_json(self, now: datetime) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "group": self.group,
            "live_notices": self.live_notices,
            "workloads": self.workloads,
            "gpus": self.gpu_milli / MILLI_PER_GPU,
            "soonest_deadline": self.soonest_deadline,
            "seconds_left": _seconds_left(self.soonest_deadline, now),
            "delivery_failures": self.delivery_failures,
        }


@dataclass(frozen=True, slots=True)
class BoardSummary:
    """The board's totals over the live notices `viewer` may see (group and quota filters apply, the
    state filter does not: the summary is about what is still to happen) and one row per group."""

    live_notices: int
    workloads: int
    gpu_milli: int
    soonest_deadline: datetime | None
    delivery_failures: int
    groups: tuple[GroupSummary, ...]

    def as_json(self, now: datetime | None = None) -> dict[str, Any]:
        now = now or timezone.now()
        return {
            "live_notices": self.live_notices,
            "workloads": self.workloads,
            "gpus": self.gpu_milli / MILLI_PER_GPU,
            "soonest_deadline": self.soonest_deadline,
            "seconds_left": _seconds_left(self.soonest_deadline, now),
            "delivery_failures": self.delivery_failures,
            "groups": [g.as_json(now) for g in self.groups],
        }


def _seconds_left(deadline: datetime | None, now: datetime) -> int | None:
    return None if deadline is None else max(0, int((deadline - now).total_seconds()))


def board_summary(viewer: Any, query: BoardQuery) -> BoardSummary:
    """Totals and per-group figures of the live notices (see BoardSummary). GPUs under notice are
    those charged to the noticed workloads still live (one query per group with live notices)."""
    live = _filtered(viewer, query).filter(_LIVE)
    per_group: dict[int, dict[str, Any]] = {}
    rows = live.order_by("group__name", "pk").values_list(
        "group_id", "group__name", "workload_id", "deadline", "signal_state", "hook_state"
    )
    for group_id, name, workload_id, deadline, signal_state, hook_state in rows:
        entry = per_group.setdefault(
            group_id, {"name": name, "notices": 0, "workloads": set(), "soonest": None, "failed": 0}
        )
        entry["notices"] += 1
        entry["workloads"].add(workload_id)
        if entry["soonest"] is None or deadline < entry["soonest"]:
            entry["soonest"] = deadline
        if DeliveryState.FAILED in (signal_state, hook_state):
            entry["failed"] += 1
    groups = tuple(
        GroupSummary(
            group_id=group_id,
            group=entry["name"],
            live_notices=entry["notices"],
            workloads=len(entry["workloads"]),
            gpu_milli=live_gpu_milli(group_id, entry["workloads"]),
            soonest_deadline=entry["soonest"],
            delivery_failures=entry["failed"],
        )
        for group_id, entry in per_group.items()
    )
    deadlines = [g.soonest_deadline for g in groups if g.soonest_deadline is not None]
    return BoardSummary(
        live_notices=sum(g.live_notices for g in groups),
        workloads=sum(g.workloads for g in groups),
        gpu_milli=sum(g.gpu_milli for g in groups),
        soonest_deadline=min(deadlines) if deadlines else None,
        delivery_failures=sum(g.delivery_failures for g in groups),
        groups=groups,
    )


def query_params(query: BoardQuery) -> Mapping[str, str]:
    """The filters of `query` as query parameters (links to the next page keep them)."""
    params: dict[str, str] = {}
    if query.state != BoardState.ALL:
        params["state"] = query.state.value
    if query.group is not None:
        params["group"] = query.group.name
    if query.quota is not None:
        params["quota"] = str(query.quota.pk)
    if query.limit != DEFAULT_BOARD_LIMIT:
        params["limit"] = str(query.limit)
    return params
