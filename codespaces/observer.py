"""The workload observer: scheduling calls it after commit when codespace workloads change state."""

from __future__ import annotations

from collections.abc import Sequence

from codespaces import services


def on_codespace_workloads_changed(workload_ids: Sequence[int]) -> None:
    """Map each workload's new state onto its codespace (see services.sync_from_workloads)."""
    services.sync_from_workloads(list(workload_ids))
