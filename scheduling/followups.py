"""The work services hand to the task queue after a commit: run a shard's cycle, make placed workloads
real on the backend, remove a placement's cluster objects.

Tasks call services, so services may not import tasks: `scheduling.tasks.TaskFollowUps` implements this
protocol with the Celery tasks and `scheduling.apps.SchedulingConfig.ready` installs it. Services send
through `followups()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from django.core.exceptions import ImproperlyConfigured


class BackendRelease(NamedTuple):
    """The cluster objects of one placement of a workload, to remove (placement None: whatever the
    workload has)."""

    workload_id: int
    name: str
    delete_home: bool
    home_name: str
    placement_id: int | None


class FollowUps(Protocol):
    def run_cycle(self, group_id: int) -> None:
        """Queue one scheduling cycle of the shard on its queue."""
        ...

    def materialize(self, workload_ids: Sequence[int]) -> None:
        """Queue making these placed workloads real on the backend."""
        ...

    def release_all(self, items: Sequence[BackendRelease]) -> None:
        """Queue removing the cluster objects of these placements (batched: one task per chunk)."""
        ...

    def deliver_reclaim_notice(self, notice_id: int) -> None:
        """Queue telling a reclaim notice's workload (backend signal, checkpoint webhook)."""
        ...


_installed: list[FollowUps] = []


def install(sender: FollowUps) -> None:
    """Make `sender` the way services queue follow-up work (the app's ready() calls this)."""
    _installed[:] = [sender]


def followups() -> FollowUps:
    """The installed sender; ImproperlyConfigured before the scheduling app is ready."""
    if not _installed:
        raise ImproperlyConfigured("scheduling.followups: no sender installed.")
    return _installed[0]
