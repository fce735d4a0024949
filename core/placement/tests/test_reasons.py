"""UnplacedReason.is_capacity: which refusals freed capacity (reclaim) can change."""

from core.placement import UnplacedReason


def test_only_reasons_about_free_capacity_count_as_capacity() -> None:
    capacity = {reason for reason in UnplacedReason if reason.is_capacity}
    assert capacity == {
        UnplacedReason.INSUFFICIENT_GPU,
        UnplacedReason.GPU_MEMORY,
        UnplacedReason.INSUFFICIENT_CPU,
        UnplacedReason.INSUFFICIENT_MEMORY,
        UnplacedReason.GANG_INCOMPLETE,
        UnplacedReason.RESERVED,
    }


def test_constraints_that_no_freed_capacity_changes_are_not_capacity() -> None:
    for reason in (
        UnplacedReason.INVALID_REQUEST,
        UnplacedReason.CORDONED,
        UnplacedReason.NODE_LABELS,
        UnplacedReason.NO_GPU_MODEL,
        UnplacedReason.TOPOLOGY,
    ):
        assert not reason.is_capacity, reason
