"""After a burst, a worker's heap is collected once and frozen, so full collections skip it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from scheduling.services import heap


@pytest.fixture
def settling(settings) -> Iterator[None]:  # type: ignore[no-untyped-def]
    settings.TESSERA_GC_SETTLE_SECONDS = 10.0
    heap._state.update(busy=True, settled_at=float("-inf"))
    yield
    gc.unfreeze()
    heap._state.update(busy=True, settled_at=float("-inf"))


def test_the_first_idle_moment_after_work_freezes_the_heap_and_collects_its_garbage(
    settling,
) -> None:
    class Cycle:
        other: object

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a  # garbage only the collector frees
    del a, b
    gc.unfreeze()
    assert heap.settle_after_burst(now=100.0)
    assert gc.get_freeze_count() > 0
    assert not any(type(o) is Cycle for o in gc.get_objects())  # collected before the freeze


def test_no_second_settle_without_new_work_or_within_the_interval(settling) -> None:
    assert heap.settle_after_burst(now=100.0)
    assert not heap.settle_after_burst(now=200.0)  # idle since: nothing to settle
    heap.note_busy()
    assert not heap.settle_after_burst(now=105.0)  # within 10 s of the last one
    assert heap.settle_after_burst(now=111.0)


def test_a_zero_interval_turns_it_off(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TESSERA_GC_SETTLE_SECONDS = 0.0
    heap.note_busy()
    assert not heap.settle_after_burst(now=1e9)


@pytest.mark.django_db
def test_the_idle_cycle_after_a_placing_one_settles_the_worker(settling) -> None:
    from scheduling import services
    from scheduling.tests.factories import (
        make_group,
        make_quota,
        small_cluster,
        submit_whole_gpu_jobs,
    )

    small_cluster()
    quota = make_quota(make_group())
    submit_whole_gpu_jobs(quota, 2, "job")
    heap._state.update(busy=False, settled_at=float("-inf"))
    gc.unfreeze()
    services.run_cycle(quota.group_id)  # places them: busy
    assert gc.get_freeze_count() == 0
    services.run_cycle(quota.group_id)  # nothing waits any more: idle
    assert gc.get_freeze_count() > 0
    assert heap._state["busy"] is False
