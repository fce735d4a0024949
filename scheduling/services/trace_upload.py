"""An uploaded trace for the what-if planner: a CSV in the openb pod-list format read into the simulator's
timed requests, bounded and validated row by row.

Columns (a header row; others such as ``qos`` and ``pod_phase`` are ignored): ``name``, ``cpu_milli``,
``memory_mib``, ``num_gpu``, ``gpu_milli`` (per GPU, 1000 = a whole card), ``gpu_spec`` (allowed GPU models
separated by ``|``, empty = any), ``creation_time``, ``deletion_time`` and ``scheduled_time`` (seconds;
``scheduled_time`` empty = never started). As in `bench.dynamic`: submit = creation − the earliest
creation, duration = deletion − (scheduled, else creation), at least one second; ``real_start`` =
scheduled − the earliest creation. An optional ``team`` column names the team (the quota caps of the
change apply to it). Problems are an `InvalidInput` on the field ``trace`` naming the row and the column.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from core.placement import GPU_MILLI, PlacementRequest
from core.simulation import TimedRequest
from portal.errors import InvalidInput

#: Largest upload (bytes) and most data rows.
#: (a request body stays under `TESSERA_MAX_REQUEST_BODY_BYTES`' default of 1 MiB; an openb pod list
#: of 8,152 pods is about 0.6 MB)
MAX_TRACE_BYTES = 1_000_000
MAX_TRACE_ROWS = 20_000
#: Longest span of creation times (seconds): a year.
MAX_TRACE_SPAN = 366 * 86400
#: Errors reported at most (the first ones).
MAX_ERRORS = 10
REQUIRED = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "creation_time",
    "deletion_time",
)
#: column -> (lowest, highest) accepted whole number.
BOUNDS: dict[str, tuple[int, int]] = {
    "cpu_milli": (0, 1_024_000),
    "memory_mib": (0, 16_777_216),
    "num_gpu": (0, 64),
    "gpu_milli": (0, GPU_MILLI),
    "creation_time": (0, 10**11),
    "deletion_time": (0, 10**11),
    "scheduled_time": (0, 10**11),
}
MAX_NAME = 253
MAX_SPEC = 512
MAX_TEAM = 64


@dataclass(frozen=True)
class UploadedTrace:
    """The trace's requests (submit 0 = the earliest creation) and the last moment it covers (its last
    deletion: the replays' horizon)."""

    requests: tuple[TimedRequest, ...]
    end: int


def _fail(reasons: list[str]) -> InvalidInput:
    return InvalidInput(f"trace: {reasons[0]}", fields={"trace": reasons[:MAX_ERRORS]})


def _decode(data: bytes) -> str:
    if len(data) > MAX_TRACE_BYTES:
        raise _fail([f"At most {MAX_TRACE_BYTES // 1_000_000} MB."])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(["Not UTF-8 text."]) from exc


def parse_trace(data: bytes) -> UploadedTrace:
    """Read an openb pod-list CSV (module docstring); raises InvalidInput on ``trace``."""
    reader = csv.DictReader(io.StringIO(_decode(data)))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise _fail([f"Not a CSV file ({exc})."]) from exc
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise _fail([f"Missing columns: {', '.join(missing)} (the openb pod-list header)."])
    errors: list[str] = []
    rows: list[tuple[PlacementRequest, int, int, int | None, str]] = []
    names: set[str] = set()
    try:
        for number, row in enumerate(reader, start=2):
            if len(rows) >= MAX_TRACE_ROWS:
                raise _fail([f"At most {MAX_TRACE_ROWS} rows."])
            parsed = _row(row, number, names, errors)
            if parsed is not None:
                rows.append(parsed)
            if len(errors) >= MAX_ERRORS:
                break
    except csv.Error as exc:
        raise _fail([f"Not a CSV file ({exc})."]) from exc
    if errors:
        raise _fail(errors)
    if not rows:
        raise _fail(["No rows: the trace needs at least one pod."])
    origin = min(created for _, created, _, _, _ in rows)
    if max(created for _, created, _, _, _ in rows) - origin > MAX_TRACE_SPAN:
        raise _fail([f"creation_time spans more than {MAX_TRACE_SPAN // 86400} days."])
    out = []
    for request, created, deleted, scheduled, team in rows:
        started = scheduled if scheduled is not None else created
        out.append(
            TimedRequest(
                request,
                submit=created - origin,
                duration=max(1, deleted - started),
                team=team,
                real_start=None if scheduled is None else scheduled - origin,
            )
        )
    end = max(deleted for _, _, deleted, _, _ in rows) - origin
    return UploadedTrace(tuple(out), max(1, end))


def _row(
    row: dict[str, str | None], number: int, names: set[str], errors: list[str]
) -> tuple[PlacementRequest, int, int, int | None, str] | None:
    """One data row, or None with its problems appended to ``errors`` ("row N, column: why")."""
    before = len(errors)

    def problem(column: str, why: str) -> None:
        errors.append(f"Row {number}, {column}: {why}")

    if None in row:  # more cells than the header has columns
        problem("row", "more cells than the header has columns.")
        return None
    name = (row.get("name") or "").strip()
    if not name or len(name) > MAX_NAME:
        problem("name", f"1 to {MAX_NAME} characters.")
    elif name in names:
        problem("name", f"{name[:40]!r} appears twice.")
    values: dict[str, int | None] = {}
    for column, (low, high) in BOUNDS.items():
        raw = (row.get(column) or "").strip()
        if not raw:
            if column in REQUIRED:
                problem(column, "required.")
            values[column] = None
            continue
        try:
            value = int(raw)
        except ValueError:
            problem(column, f"{raw[:20]!r} is not a whole number.")
            continue
        if not low <= value <= high:
            problem(column, f"must be between {low} and {high}.")
            continue
        values[column] = value
    spec = (row.get("gpu_spec") or "").strip()
    models = tuple(m for m in spec.split("|") if m)
    if len(spec) > MAX_SPEC or any(len(m) > 64 for m in models):
        problem("gpu_spec", f"at most {MAX_SPEC} characters, models of at most 64.")
    team = (row.get("team") or "").strip()
    if len(team) > MAX_TEAM:
        problem("team", f"at most {MAX_TEAM} characters.")
    if len(errors) > before:
        return None
    created, deleted = int(values["creation_time"] or 0), int(values["deletion_time"] or 0)
    scheduled = values.get("scheduled_time")
    if deleted < created:
        problem("deletion_time", "before creation_time.")
        return None
    if scheduled is not None and not created <= scheduled <= deleted:
        problem("scheduled_time", "must lie between creation_time and deletion_time.")
        return None
    names.add(name)
    gpus, milli = int(values["num_gpu"] or 0), int(values["gpu_milli"] or 0)
    request = PlacementRequest(
        request_id=name,
        cpu_milli=int(values["cpu_milli"] or 0),
        memory_mib=int(values["memory_mib"] or 0),
        gpu_count=gpus if milli > 0 else 0,
        gpu_milli=milli if gpus > 0 else 0,
        gpu_models=models,
    )
    return request, created, deleted, scheduled, team
