"""plan_placements: order, gangs, labels, cordon, health, topology, GPU memory, purity."""

from __future__ import annotations

from core.placement import (
    GangSpec,
    ReservationPolicy,
    TopologyPolicy,
    UnplacedReason,
    order_requests,
    plan_placements,
    queue_key,
)

from .builders import cluster, node, placed, reasons, req


def test_plan_does_not_mutate_the_state() -> None:
    s = cluster(node("a", 2))
    before = s.gpu_free.copy()
    plan = plan_placements(s, [req("r", gpus=1, milli=500)])
    assert placed(plan) == {"r": ("a", (0,))}
    assert (s.gpu_free == before).all()


def test_priority_then_input_order() -> None:
    s = cluster(node("a", 1))
    plan = plan_placements(
        s, [req("low", gpus=1, milli=1000), req("high", gpus=1, milli=1000, priority=5)]
    )
    assert placed(plan) == {"high": ("a", (0,))}
    assert reasons(plan) == {"low": "insufficient_gpu"}


def test_every_request_is_placed_or_unplaced_once() -> None:
    s = cluster(node("a", 2), node("b", 1))
    reqs = [req(f"r{i}", gpus=1, milli=400) for i in range(8)]
    plan = plan_placements(s, reqs, policy="firstfit")
    ids = sorted([a.request_id for a in plan.placements] + [u.request_id for u in plan.unplaced])
    assert ids == sorted(r.request_id for r in reqs)
    assert len(plan.placements) == 6


def test_gang_all_or_nothing_leaves_state_unchanged() -> None:
    s = cluster(node("a", 2), node("b", 1))
    gang = GangSpec("g", ("w0", "w1", "w2"), min_available=3)
    reqs = [req(f"w{i}", gpus=2, milli=1000) for i in range(3)] + [req("solo", gpus=1, milli=500)]
    plan = plan_placements(s, reqs, gangs=[gang])
    assert set(placed(plan)) == {"solo"}
    assert {u.request_id: u.reason for u in plan.unplaced} == {
        f"w{i}": UnplacedReason.GANG_INCOMPLETE for i in range(3)
    }
    msg = plan.unplaced[0].message
    assert "Gang g needs 3 of 3" in msg
    assert "only 1 fit" in msg


def test_gang_with_min_available_keeps_the_members_that_fit() -> None:
    s = cluster(node("a", 2), node("b", 2))
    gang = GangSpec("g", ("w0", "w1", "w2"), min_available=2)
    plan = plan_placements(s, [req(f"w{i}", gpus=2, milli=1000) for i in range(3)], gangs=[gang])
    assert len(plan.placements) == 2
    assert reasons(plan) == {"w2": "insufficient_gpu"}


def test_labels_cordon_health_and_models() -> None:
    s = cluster(
        node("cordoned", 2, schedulable=False),
        node("sick", 1, unhealthy=(0,)),
        node("t4", 1, model="T4", labels=(("zone", "b"),)),
        node("ok", 1, labels=(("zone", "a"),)),
    )
    plan = plan_placements(
        s,
        [
            req("lab", gpus=1, milli=500, node_labels=(("zone", "a"),)),
            req("model", gpus=1, milli=500, gpu_models=("T4",)),
            req("none", gpus=1, milli=500, gpu_models=("H100",)),
        ],
    )
    assert placed(plan) == {"lab": ("ok", (0,)), "model": ("t4", (0,))}
    assert reasons(plan) == {"none": "no_gpu_model"}


def test_gpu_memory_of_slices_is_respected() -> None:
    s = cluster(node("a", 1, gpu_mem=16384))
    plan = plan_placements(
        s, [req(f"s{i}", gpus=1, milli=100, gpu_mem=6000) for i in range(3)], policy="fgd"
    )
    assert len(plan.placements) == 2
    assert reasons(plan) == {"s2": "gpu_memory"}


def test_topology_restricted_and_preferred() -> None:
    split = node("split", 4, numa=(0, 1, 0, 1), nvlink=(0, 1, 2, 3))
    s = cluster(split)
    s.apply(_a("pre", "split", 0))
    r = req("r", gpus=2, milli=1000, topology=TopologyPolicy.RESTRICTED)
    plan = plan_placements(s, [r])
    assert placed(plan) == {"r": ("split", (1, 3))}  # NUMA node 1 holds both
    s.apply(_a("pre2", "split", 1))
    assert reasons(plan_placements(s, [r])) == {"r": "topology"}
    pref = req("p", gpus=2, milli=1000, topology=TopologyPolicy.PREFERRED)
    assert placed(plan_placements(s, [pref])) == {"p": ("split", (2, 3))}


def _a(rid: str, n: str, gpu: int):  # type: ignore[no-untyped-def]
    from core.placement import Assignment

    return Assignment(rid, n, (gpu,), 1000, 40960, 0, 0)


def test_cpu_only_work_prefers_nodes_without_gpus_and_respects_reservation() -> None:
    s = cluster(node("g", 1, cpu=10000), node("c", 0, cpu=4000), reservation=ReservationPolicy(0.5))
    plan = plan_placements(s, [req("c1", cpu=3000), req("c2", cpu=3000), req("c3", cpu=3000)])
    assert placed(plan) == {"c1": ("c", ()), "c2": ("g", ())}
    assert reasons(plan) == {"c3": "reserved"}


def test_invalid_requests_come_back_as_data() -> None:
    s = cluster(node("a", 1))
    plan = plan_placements(s, [req("bad", gpus=2, milli=500), req("neg", cpu=-1)])
    assert reasons(plan) == {"bad": "invalid_request", "neg": "invalid_request"}


def test_same_input_same_plan_for_every_policy() -> None:
    from core.placement import POLICIES

    reqs = [req(f"r{i}", cpu=500 * (i % 3 + 1), gpus=1, milli=150 * (i % 6 + 1)) for i in range(20)]
    for policy in POLICIES:
        plans = [
            plan_placements(cluster(node("a", 4), node("b", 2), node("c", 8)), reqs, policy=policy)
            for _ in range(2)
        ]
        assert plans[0] == plans[1], policy


def test_the_queue_key_puts_higher_priority_first_then_each_tie_breaker_ascending() -> None:
    keys = {
        "low, old": queue_key(0, 0.1, 5, "a"),
        "high, over share": queue_key(3, 0.9, 9, "b"),
        "high, under share": queue_key(3, 0.2, 9, "c"),
        "high, under share, older": queue_key(3, 0.2, 1, "d"),
    }
    assert sorted(keys, key=keys.__getitem__) == [
        "high, under share, older",
        "high, under share",
        "high, over share",
        "low, old",
    ]


def test_the_planner_orders_by_the_queue_key_keeping_input_order_on_ties() -> None:
    requests = [req("a"), req("b", priority=2), req("c"), req("d", priority=2)]
    assert [r.request_id for r in order_requests(requests)] == ["b", "d", "a", "c"]
