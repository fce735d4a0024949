"""Topology-aware gangs across nodes: one rack / block / NVLink domain, required or preferred."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement import (
    Assignment,
    ClusterState,
    GangSpec,
    GangTopology,
    NodeSpec,
    PlacementRequest,
    TopologyLevel,
    TopologyMode,
    UnplacedReason,
    plan_placements,
)
from core.placement.topology import domain_levels

from .builders import cluster, node, req

LEVELS = (
    TopologyLevel("block", "net/block"),
    TopologyLevel("rack", "net/rack"),
    TopologyLevel("nvlink", "nvidia.com/gpu.clique"),
)


def racked_nodes(
    blocks: int = 2, racks: int = 2, nodes: int = 4, gpus: int = 8, nvlink: int = 2
) -> list[NodeSpec]:
    """``blocks`` blocks of ``racks`` racks of ``nodes`` nodes; every ``nvlink`` nodes of a rack share an
    NVLink domain. Names: b0-r1-n2; rack label values repeat across blocks (r0, r1, ...)."""
    out = []
    for b in range(blocks):
        for r in range(racks):
            for n in range(nodes):
                labels = (
                    ("net/block", f"b{b}"),
                    ("net/rack", f"r{r}"),
                    ("nvidia.com/gpu.clique", f"c{n // nvlink}"),
                )
                out.append(node(f"b{b}-r{r}-n{n}", gpus, labels=labels))
    return out


def interleaved_nodes(racks: int, nodes: int, gpus: int = 8) -> list[NodeSpec]:
    """``racks * nodes`` nodes n00, n01, ... dealt to the racks in turn (n00 in r0, n01 in r1, ...), as
    when node names follow purchase order, not the racks; two nodes of a rack share an NVLink domain."""
    out = []
    for i in range(racks * nodes):
        labels = (
            ("net/block", "b0"),
            ("net/rack", f"r{i % racks}"),
            ("nvidia.com/gpu.clique", f"c{i // racks // 2}"),
        )
        out.append(node(f"n{i:02d}", gpus, labels=labels))
    return out


def gang_of(
    name: str, pods: int, gpus: int, level: str | None, mode: TopologyMode = TopologyMode.REQUIRED
) -> tuple[list[PlacementRequest], GangSpec]:
    reqs = [req(f"{name}-{i}", gpus=gpus, milli=1000) for i in range(pods)]
    topo = GangTopology(level, mode) if level else None
    return reqs, GangSpec(name, tuple(r.request_id for r in reqs), pods, topo)


def rack_of(node_name: str) -> str:
    return node_name.rsplit("-", 1)[0]


def occupy(state: ClusterState, node_name: str, gpus: int) -> None:
    state.apply(
        Assignment(
            f"busy-{node_name}", node_name, tuple(range(gpus)), 1000, 40960 * gpus, 1000, 1024
        )
    )


def test_racks_with_the_same_label_in_two_blocks_are_two_domains() -> None:
    state = cluster(*racked_nodes())
    block, rack, nvlink = domain_levels(state, LEVELS)
    assert (block.count, rack.count, nvlink.count) == (2, 4, 8)
    i, j = state.index["b0-r1-n0"], state.index["b1-r1-n0"]
    assert rack.names[rack.node_domain[i]] == rack.names[rack.node_domain[j]] == "r1"
    assert rack.node_domain[i] != rack.node_domain[j]
    assert block.names[rack.parent[rack.node_domain[j]]] == "b1"


def test_a_16_pod_gang_required_in_one_rack_lands_in_one_rack() -> None:
    state = cluster(*racked_nodes())
    occupy(state, "b0-r0-n0", 1)  # every rack but b0-r0 stays fully free
    reqs, gang = gang_of("train", 16, 2, "rack")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert plan.unplaced == ()
    assert len(plan.placements) == 16
    assert len({rack_of(a.node) for a in plan.placements}) == 1
    assert rack_of(plan.placements[0].node) != "b0-r0"  # 31 free GPUs there cannot hold 32


def test_a_16_pod_gang_no_rack_holds_waits_with_the_level_and_the_largest_free_rack() -> None:
    state = cluster(*racked_nodes())
    for b in range(2):
        for r in range(2):
            occupy(state, f"b{b}-r{r}-n0", 4 if (b, r) != (1, 0) else 2)
    reqs, gang = gang_of("train", 16, 2, "rack")
    before = state.totals()
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert plan.placements == ()
    assert {u.reason for u in plan.unplaced} == {UnplacedReason.GANG_TOPOLOGY}
    assert len(plan.unplaced) == 16
    first = plan.unplaced[0]
    assert first.largest_domain == ("rack", "r0", 30000)
    assert "one rack" in first.message
    assert "32 GPUs" in first.message
    assert "r0 with 30 GPUs free" in first.message
    assert not UnplacedReason.GANG_TOPOLOGY.is_capacity
    assert state.totals() == before


def test_the_same_gang_without_topology_spreads_over_racks() -> None:
    """The contrast: the topology-blind gang fits (the cluster has 48 free GPUs) across racks."""
    state = cluster(*racked_nodes())
    for b in range(2):
        for r in range(2):
            occupy(state, f"b{b}-r{r}-n0", 4 if (b, r) != (1, 0) else 2)
    reqs, gang = gang_of("train", 16, 2, None)
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert len(plan.placements) == 16
    assert len({rack_of(a.node) for a in plan.placements}) > 1


def test_preferred_takes_the_tightest_domain_that_fits() -> None:
    state = cluster(*racked_nodes())
    reqs, gang = gang_of("small", 2, 8, "rack", TopologyMode.PREFERRED)
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    nodes = {a.node for a in plan.placements}
    assert len(nodes) == 2
    ids = [state.index[n] for n in nodes]
    nvlink = domain_levels(state, LEVELS)[2]
    # one NVLink domain, tighter than a rack
    assert len({int(nvlink.node_domain[i]) for i in ids}) == 1


def test_preferred_widens_to_a_block_then_to_anywhere() -> None:
    state = cluster(*racked_nodes())
    for b in range(2):
        for r in range(2):
            occupy(state, f"b{b}-r{r}-n0", 8)  # each rack: 24 GPUs free, each block 48
    reqs, gang = gang_of("mid", 5, 8, "rack", TopologyMode.PREFERRED)  # 40 GPUs: one block
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert len(plan.placements) == 5
    assert len({a.node.split("-")[0] for a in plan.placements}) == 1
    reqs, gang = gang_of("big", 7, 8, "rack", TopologyMode.PREFERRED)  # 56 GPUs: no block holds it
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert len(plan.placements) == 7
    assert len({a.node.split("-")[0] for a in plan.placements}) == 2


def test_required_at_a_level_the_pool_lacks_waits_and_says_so() -> None:
    state = cluster(*racked_nodes())
    reqs, gang = gang_of("g", 2, 1, "zone")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert plan.placements == ()
    assert plan.unplaced[0].reason is UnplacedReason.GANG_TOPOLOGY
    assert "no topology level 'zone'" in plan.unplaced[0].message


def test_required_on_nodes_without_the_label_waits_naming_the_label() -> None:
    state = cluster(*(node(f"n{i}", 8) for i in range(4)))
    reqs, gang = gang_of("g", 2, 8, "rack")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    assert plan.placements == ()
    assert plan.unplaced[0].largest_domain == ("rack", "", 0)
    assert "net/rack" in plan.unplaced[0].message


def _mixed_sequence(topology: bool) -> tuple[int, int]:
    """An empty cluster of 4 racks of 4 nodes whose names do not follow the racks; eight 2-pod gangs of
    4-GPU pods (64 GPUs: two racks' worth), then one 4-pod gang of 8-GPU pods requiring a rack, one plan each
    (as successive cycles). Returns (small gangs placed, large gang pods placed)."""
    state = cluster(*interleaved_nodes(racks=4, nodes=4))
    small = 0
    for g in range(8):
        reqs, gang = gang_of(f"s{g}", 2, 4, "rack" if topology else None)
        plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
        for a in plan.placements:
            state.apply(a)
        small += len(plan.placements) == 2
    reqs, gang = gang_of("large", 4, 8, "rack")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    return small, len(plan.placements)


def test_in_a_mixed_sequence_a_whole_rack_stays_free_for_the_large_gang() -> None:
    assert _mixed_sequence(topology=True) == (8, 4)


def test_topology_blind_small_gangs_leave_no_rack_for_the_large_gang() -> None:
    assert _mixed_sequence(topology=False) == (8, 0)


def test_gangs_without_topology_plan_exactly_as_before() -> None:
    state = cluster(*racked_nodes())
    reqs = [req(f"w{i}", gpus=3, milli=1000) for i in range(6)]
    gang = GangSpec("g", tuple(r.request_id for r in reqs), 6)
    with_levels = plan_placements(state, reqs, gangs=[gang], topology_levels=LEVELS)
    without = plan_placements(state, reqs, gangs=[gang])
    assert with_levels == without


def test_racks_count_as_domains_when_no_node_carries_the_wider_zone_label() -> None:
    state = cluster(*interleaved_nodes(racks=2, nodes=2))
    levels = (TopologyLevel("zone", "topology.kubernetes.io/zone"), *LEVELS)
    reqs, gang = gang_of("train", 4, 4, "rack")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=levels)
    assert len(plan.placements) == 4
    assert len({int(a.node[1:]) % 2 for a in plan.placements}) == 1  # n00, n02 or n01, n03
    # one rack (or block) is inside one zone: a gang requiring a zone may land in a tighter domain
    reqs, gang = gang_of("zoned", 2, 8, "zone")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=levels)
    assert len(plan.placements) == 2
    # but one no tighter domain holds waits, saying no node carries the zone label
    reqs, gang = gang_of("huge", 5, 8, "zone")
    plan = plan_placements(state, reqs, gangs=[gang], topology_levels=levels)
    assert plan.unplaced[0].largest_domain == ("zone", "", 0)
    assert "no node carries the topology.kubernetes.io/zone label" in plan.unplaced[0].message


@st.composite
def topology_cases(
    draw: st.DrawFn,
) -> tuple[ClusterState, list[PlacementRequest], list[GangSpec]]:
    """A random racked cluster, partly used, and a few gangs with random co-location requests."""
    racks, nodes = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    state = cluster(*interleaved_nodes(racks=racks, nodes=nodes))
    for name in state.names:
        used = draw(st.integers(0, 8))
        if used:
            occupy(state, name, used)
    reqs: list[PlacementRequest] = []
    gangs: list[GangSpec] = []
    for g in range(draw(st.integers(1, 4))):
        pods, gpus = draw(st.integers(1, 5)), draw(st.sampled_from((1, 2, 4, 8)))
        level = draw(st.sampled_from((None, "block", "rack", "nvlink")))
        mode = draw(st.sampled_from(tuple(TopologyMode)))
        members, gang = gang_of(f"g{g}", pods, gpus, level, mode)
        need = draw(st.integers(1, pods))
        reqs.extend(members)
        gangs.append(dataclasses.replace(gang, min_available=need))
    return state, reqs, gangs


@given(topology_cases())
@settings(max_examples=60, deadline=None)
def test_every_gang_is_whole_and_a_required_one_inside_one_domain(
    case: tuple[ClusterState, list[PlacementRequest], list[GangSpec]],
) -> None:
    state, reqs, gangs = case
    before = state.totals()
    plan = plan_placements(state, reqs, gangs=gangs, topology_levels=LEVELS)
    assert state.totals() == before  # the input state is never changed
    ids = [a.request_id for a in plan.placements] + [u.request_id for u in plan.unplaced]
    assert sorted(ids) == sorted(r.request_id for r in reqs)
    work = state.copy()
    for a in plan.placements:
        work.apply(a)  # raises when a GPU would be over-committed
    levels = {lv.name: lv for lv in domain_levels(state, LEVELS)}
    for gang in gangs:
        mine = [a for a in plan.placements if a.request_id in gang.request_ids]
        assert not mine or len(mine) >= gang.min_available
        topo = gang.topology
        if mine and topo is not None and topo.mode is TopologyMode.REQUIRED:
            level = levels[topo.level]
            assert len({int(level.node_domain[state.index[a.node]]) for a in mine}) == 1
            assert all(level.node_domain[state.index[a.node]] >= 0 for a in mine)


def test_a_gang_with_min_available_keeps_the_pods_one_rack_holds_and_says_where_it_runs() -> None:
    state = cluster(*interleaved_nodes(racks=2, nodes=2))  # racks of 2 nodes × 8 GPUs
    reqs, gang = gang_of("train", 3, 8, "rack")
    plan = plan_placements(
        state, reqs, gangs=[dataclasses.replace(gang, min_available=2)], topology_levels=LEVELS
    )
    assert len(plan.placements) == 2
    assert len({int(a.node[1:]) % 2 for a in plan.placements}) == 1
    (left,) = plan.unplaced
    assert left.reason is UnplacedReason.GANG_TOPOLOGY
    assert "runs in nvlink c0 with 2 of 3 pods (at least 2)" in left.message  # tighter than a rack
