"""The workload observer: scheduling calls it after commit when codespace workloads change state."""

from __future__ import annotations

from collections.abc import Sequence

from codespaces.tasks import follow_codespace_workloads_task


def on_codespace_workloads_changed(workload_ids: Sequence[int]) -> None:
    """Enqueue the timeline follow-up for these workloads' codespaces (ids only; it re-reads them).
    Called after the scheduling transaction committed, so the task sees what it changed."""
    follow_codespace_workloads_task.delay(list(workload_ids))
