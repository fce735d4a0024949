"""MIG placement: the geometry tables, choosing card and position, static and dynamic layouts, first-fit."""

from __future__ import annotations

import pytest

from core.placement.mig import (
    MigCard,
    MigInstance,
    MigLayoutMode,
    MigPlacement,
    MigPolicy,
    MigRequest,
    MigState,
    MigUnplacedReason,
    ReconfigurationState,
    advance,
    plan_mig,
)
from core.placement.mig_profiles import MIG_GEOMETRIES, mig_geometry


def placed(plan_placements: tuple[MigPlacement, ...]) -> dict[str, tuple[str, int, str, int]]:
    return {p.request_id: (p.node, p.gpu_index, p.profile, p.start) for p in plan_placements}


def test_h100_profiles_and_positions_follow_the_mig_user_guide() -> None:
    geometry = MIG_GEOMETRIES["H100-80GB"]
    assert {p.name: p.starts for p in geometry.profiles} == {
        "1g.10gb": (0, 1, 2, 3, 4, 5, 6),
        "1g.20gb": (0, 2, 4, 6),
        "2g.20gb": (0, 2, 4),
        "3g.40gb": (0, 4),
        "4g.40gb": (0,),
        "7g.80gb": (0,),
    }
    assert [p.memory_slices for p in geometry.profiles] == [1, 2, 2, 4, 4, 8]


def test_a100_40gb_names_its_two_slice_1g_profile_1g_10gb() -> None:
    geometry = MIG_GEOMETRIES["A100-40GB"]
    assert [p.name for p in geometry.profiles] == [
        "1g.5gb",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    one_ten = geometry.profile("1g.10gb")
    assert one_ten is not None
    assert one_ten.memory_slices == 2
    assert one_ten.starts == (0, 2, 4, 6)
    assert [p.name for p in MIG_GEOMETRIES["H200"].profiles][-1] == "7g.141gb"


def test_inventory_model_names_map_to_a_geometry() -> None:
    assert mig_geometry("NVIDIA-A100-SXM4-40GB") is MIG_GEOMETRIES["A100-40GB"]
    assert mig_geometry("NVIDIA-A100-SXM4-80GB") is MIG_GEOMETRIES["A100-80GB"]
    assert mig_geometry("NVIDIA-H100-80GB-HBM3") is MIG_GEOMETRIES["H100-80GB"]
    assert mig_geometry("NVIDIA H200") is MIG_GEOMETRIES["H200"]
    assert mig_geometry("Tesla-T4") is None


def test_gpu_equivalent_counts_compute_slices_over_seven() -> None:
    geometry = MIG_GEOMETRIES["H100-80GB"]
    assert [round(p.gpu_equivalent, 4) for p in geometry.profiles] == [
        0.1429,
        0.1429,
        0.2857,
        0.4286,
        0.5714,
        1.0,
    ]
    assert geometry.smallest_covering(100).name == "1g.10gb"
    assert geometry.smallest_covering(143).name == "2g.20gb"
    assert geometry.smallest_covering(500).name == "4g.40gb"
    assert geometry.smallest_covering(1000).name == "7g.80gb"


def test_small_profile_goes_where_it_blocks_no_large_profile() -> None:
    # card 0 is empty; card 1 runs a 4g (slices 0-3) and a 2g at 4: only the 1g positions 6 is left there.
    cards = [
        MigCard("h100-01", 0, "H100-80GB"),
        MigCard(
            "h100-01",
            1,
            "H100-80GB",
            instances=(MigInstance("4g.40gb", 0, True), MigInstance("2g.20gb", 4, True)),
        ),
    ]
    plan = plan_mig(cards, [MigRequest("r1", "1g.10gb")])
    assert placed(plan.placements) == {"r1": ("h100-01", 1, "1g.10gb", 6)}
    first_fit = plan_mig(cards, [MigRequest("r1", "1g.10gb")], policy=MigPolicy.FIRST_FIT)
    assert placed(first_fit.placements) == {"r1": ("h100-01", 0, "1g.10gb", 0)}


def test_one_gig_goes_to_position_six_on_a_half_used_card_so_a_2g_still_fits() -> None:
    cards = [MigCard("n", 0, "H100-80GB", instances=(MigInstance("3g.40gb", 0, True),))]
    plan = plan_mig(cards, [MigRequest("r1", "1g.10gb")])
    assert placed(plan.placements) == {"r1": ("n", 0, "1g.10gb", 6)}
    state = MigState(cards)
    state.place(MigRequest("r1", "1g.10gb"))
    assert placed((state.place(MigRequest("r2", "2g.20gb")),)) == {"r2": ("n", 0, "2g.20gb", 4)}  # type: ignore[arg-type]


def test_static_card_only_hands_out_its_free_instances() -> None:
    cards = [
        MigCard(
            "a100-01",
            0,
            "A100-80GB",
            MigLayoutMode.STATIC,
            (MigInstance("3g.40gb", 0, False), MigInstance("1g.10gb", 4, False)),
        )
    ]
    plan = plan_mig(
        cards,
        [MigRequest("big", "3g.40gb"), MigRequest("s1", "1g.10gb"), MigRequest("s2", "1g.10gb")],
    )
    assert placed(plan.placements) == {
        "big": ("a100-01", 0, "3g.40gb", 0),
        "s1": ("a100-01", 0, "1g.10gb", 4),
    }
    assert [(u.request_id, u.reason) for u in plan.unplaced] == [
        ("s2", MigUnplacedReason.NO_FREE_POSITION)
    ]
    assert plan.reconfigurations == ()
    assert all(not p.reconfigure for p in plan.placements)


def test_free_instance_is_used_before_a_new_one_is_created() -> None:
    cards = [
        MigCard("n", 0, "H100-80GB"),
        MigCard("n", 1, "H100-80GB", instances=(MigInstance("2g.20gb", 2, False),)),
    ]
    plan = plan_mig(cards, [MigRequest("r", "2g.20gb")])
    assert placed(plan.placements) == {"r": ("n", 1, "2g.20gb", 2)}
    assert plan.reconfigurations == ()


def test_empty_dynamic_card_gets_a_new_layout_its_free_instances_destroyed() -> None:
    layout = tuple(MigInstance("1g.10gb", s, False) for s in range(7))
    plan = plan_mig([MigCard("n", 0, "H100-80GB", instances=layout)], [MigRequest("r", "7g.80gb")])
    assert placed(plan.placements) == {"r": ("n", 0, "7g.80gb", 0)}
    (reconfiguration,) = plan.reconfigurations
    assert reconfiguration.destroy == layout
    assert reconfiguration.create == (MigInstance("7g.80gb", 0, True),)
    assert reconfiguration.state is ReconfigurationState.PLANNED


def test_busy_dynamic_card_keeps_its_layout() -> None:
    layout = (MigInstance("1g.10gb", 0, True),) + tuple(
        MigInstance("1g.10gb", s, False) for s in range(1, 7)
    )
    plan = plan_mig([MigCard("n", 0, "H100-80GB", instances=layout)], [MigRequest("r", "3g.40gb")])
    assert plan.placements == ()
    assert [u.reason for u in plan.unplaced] == [MigUnplacedReason.NO_FREE_POSITION]
    assert plan.reconfigurations == ()


def test_unknown_profile_and_wrong_model_are_unplaced_with_a_reason() -> None:
    cards = [MigCard("n", 0, "H100-80GB")]
    plan = plan_mig(cards, [MigRequest("a", "1g.5gb"), MigRequest("b", "5g.50gb")])
    assert {u.request_id: u.reason for u in plan.unplaced} == {
        "a": MigUnplacedReason.UNKNOWN_PROFILE,
        "b": MigUnplacedReason.UNKNOWN_PROFILE,
    }


def test_unhealthy_card_and_other_nodes_are_never_chosen() -> None:
    cards = [
        MigCard("n1", 0, "H100-80GB", healthy=False),
        MigCard("n2", 0, "H100-80GB"),
        MigCard("n3", 0, "H100-80GB"),
    ]
    plan = plan_mig(cards, [MigRequest("r", "1g.10gb", nodes=("n1", "n3"))])
    assert placed(plan.placements) == {"r": ("n3", 0, "1g.10gb", 6)}


def test_invalid_inventory_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="not a valid placement"):
        MigState([MigCard("n", 0, "H100-80GB", instances=(MigInstance("3g.40gb", 2),))])
    with pytest.raises(ValueError, match="overlap"):
        MigState(
            [
                MigCard(
                    "n",
                    0,
                    "H100-80GB",
                    instances=(MigInstance("4g.40gb", 0), MigInstance("2g.20gb", 2)),
                )
            ]
        )


def test_reconfiguration_state_machine() -> None:
    state = advance(ReconfigurationState.PLANNED, ReconfigurationState.APPLYING)
    assert advance(state, ReconfigurationState.READY) is ReconfigurationState.READY
    assert advance(state, ReconfigurationState.FAILED) is ReconfigurationState.FAILED
    with pytest.raises(ValueError, match="from planned to ready"):
        advance(ReconfigurationState.PLANNED, ReconfigurationState.READY)
    with pytest.raises(ValueError):
        advance(ReconfigurationState.READY, ReconfigurationState.APPLYING)


def test_batch_places_large_profiles_first_whatever_the_input_order() -> None:
    cards = [MigCard("n", 0, "H100-80GB")]
    requests = [MigRequest("s", "3g.40gb"), MigRequest("b", "4g.40gb")]
    plan = plan_mig(cards, requests)
    assert placed(plan.placements) == {
        "b": ("n", 0, "4g.40gb", 0),
        "s": ("n", 0, "3g.40gb", 4),
    }
    assert plan == plan_mig(cards, list(reversed(requests)))


def test_release_unpartitions_a_created_instance_and_frees_an_existing_one() -> None:
    cards = [
        MigCard("n", 0, "H100-80GB"),
        MigCard("s", 0, "H100-80GB", MigLayoutMode.STATIC, (MigInstance("7g.80gb", 0),)),
    ]
    state = MigState(cards)
    small = state.place(MigRequest("small", "3g.40gb"))
    whole = state.place(MigRequest("whole", "7g.80gb"))
    assert placed((small, whole)) == {  # type: ignore[arg-type]
        "small": ("n", 0, "3g.40gb", 4),
        "whole": ("s", 0, "7g.80gb", 0),
    }
    assert state.used_compute_slices() == 10
    assert state.release("small")
    assert state.release("whole")
    assert not state.release("small")
    assert state.used_compute_slices() == 0
    assert state.placeable_cards(5) == 1  # the dynamic card is unpartitioned again
    again = state.place(MigRequest("again", "7g.80gb"))
    assert placed((again,)) == {"again": ("s", 0, "7g.80gb", 0)}  # type: ignore[arg-type]
