"""The vectorised node scoring of FGD and Tessera (``score_nodes``) gives exactly what the per-node
``score_key`` gives, on node states of every kind; and the engine's caches stay bounded."""

from __future__ import annotations

import random

import numpy as np
import pytest

from core.placement import POLICIES, ClusterState, PlacementRequest, TypicalPod, place_one
from core.placement.filters import feasible_mask
from core.placement.fragmentation import FragModel
from core.placement.memo import LruTables, TwoGenerationMemo
from core.placement.policies.fgd import FgdPolicy, fgd_score, fgd_scores

from .builders import cluster, node

TYPICAL = (
    TypicalPod(4000, 250, 1, "", 0.2),
    TypicalPod(8000, 500, 1, "T4", 0.15),
    TypicalPod(16000, 1000, 1, "", 0.2),
    TypicalPod(32000, 1000, 2, "A100|L40S", 0.1),
    TypicalPod(64000, 1000, 4, "", 0.05),
    TypicalPod(2000, 0, 0, "", 0.2),
    TypicalPod(1000, 80, 1, "", 0.1),
)
SHAPES = [
    (1000, 250, 1),
    (4000, 730, 1),
    (2000, 80, 1),
    (8000, 1000, 1),
    (16000, 1000, 2),
    (32000, 1000, 4),
    (3000, 0, 0),
]


def _busy_state(seed: int) -> ClusterState:
    """40 nodes of three models (some without GPUs, some with an unhealthy GPU), partly filled."""
    rng = random.Random(seed)
    nodes = []
    for i in range(40):
        model = ("A100", "T4", "L40S")[i % 3]
        gpus = 0 if i % 13 == 0 else rng.choice([2, 4, 8])
        unhealthy = (1,) if i % 7 == 0 and gpus else ()
        nodes.append(
            node(
                f"n{i:02d}", gpus, model=model, cpu=rng.choice([64000, 96000]), unhealthy=unhealthy
            )
        )
    s = cluster(*nodes)
    pol = POLICIES["firstfit"]()
    for j in range(110):
        c, m, k = rng.choice(SHAPES)
        r = PlacementRequest(str(j), cpu_milli=c, memory_mib=1024, gpu_count=k, gpu_milli=m)
        place_one(s, r, pol)
    return s


@pytest.mark.parametrize("policy", ["fgd", "tessera"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_vectorised_scores_equal_the_per_node_scores_bit_for_bit(policy: str, seed: int) -> None:
    state = _busy_state(seed)
    pol = POLICIES[policy](typical=TYPICAL)
    assert isinstance(pol, FgdPolicy)
    pol.choose(
        state, PlacementRequest("bind", 1000, 1024), np.arange(len(state)), np.arange(len(state))
    )
    for c, m, k in SHAPES:
        r = PlacementRequest("x", cpu_milli=c, memory_mib=1, gpu_count=k, gpu_milli=m)
        nodes = np.flatnonzero(feasible_mask(state, r))  # the policy only scores feasible nodes
        assert nodes.size >= 4
        pk = (c, m, k)
        scores, vals = pol.score_rows(state, nodes, pk)
        expected = [pol.score_key(state.node_key(i), pk, None) for i in nodes.tolist()]
        assert list(np.asarray(scores)) == [e[0] for e in expected], pk
        assert vals == [e[1] for e in expected], pk


@pytest.mark.parametrize("policy", ["fgd", "tessera"])
def test_few_stale_nodes_are_scored_through_the_memo_exactly_as_the_vectorised_pass(
    policy: str,
) -> None:
    state = _busy_state(5)
    pol = POLICIES[policy](typical=TYPICAL)
    assert isinstance(pol, FgdPolicy)
    pol.choose(
        state, PlacementRequest("bind", 1000, 1024), np.arange(len(state)), np.arange(len(state))
    )
    pol.memo_scoring_up_to = len(state)
    for c, m, k in SHAPES:
        r = PlacementRequest("x", cpu_milli=c, memory_mib=1, gpu_count=k, gpu_milli=m)
        nodes = np.flatnonzero(feasible_mask(state, r))
        pk = (c, m, k)
        before = len(pol._memo)
        scores, vals = pol.score_nodes(state, nodes, pk)
        assert len(pol._memo) > before  # the per-node path ran and memoised its scores
        vector_scores, vector_vals = pol.score_rows(state, nodes, pk)
        assert list(np.asarray(scores)) == vector_scores.tolist(), pk
        assert vals == vector_vals, pk


@pytest.mark.parametrize("policy", ["fgd", "tessera"])
def test_a_fill_places_every_pod_on_the_same_node_and_gpus_whichever_scoring_path(
    policy: str,
) -> None:
    rng = random.Random(7)
    shapes = [*SHAPES, (1500, 330, 1), (6000, 470, 1)]
    requests = []
    for j in range(400):
        c, m, k = rng.choice(shapes)
        requests.append(
            PlacementRequest(str(j), cpu_milli=c, memory_mib=1024, gpu_count=k, gpu_milli=m)
        )
    placements = []
    for up_to in (0, 64, 10_000):  # vectorised only, the default mix, per node only
        state = cluster(
            *(node(f"n{i:03d}", 8, model=("T4", "A100")[i % 2], cpu=128000) for i in range(120))
        )
        pol = POLICIES[policy](typical=TYPICAL)
        assert isinstance(pol, FgdPolicy)
        pol.memo_scoring_up_to = up_to
        got = []
        for r in requests:
            a = place_one(state, r, pol)
            got.append(None if a is None else (a.node, a.gpu_indices))
        placements.append(got)
    assert sum(p is not None for p in placements[0]) > 200
    assert placements[1] == placements[0]
    assert placements[2] == placements[0]


def test_vectorised_fragmentation_equals_the_scalar_one_up_to_rounding() -> None:
    state = _busy_state(4)
    fm = FragModel(TYPICAL, state.model_index)
    rows = np.where(state.gpu_ok, state.gpu_free, 0).astype(np.int64)
    count_ge, sum_lt = fm.row_stats(rows)
    got = fm.frag_rows(
        state.model_id.astype(np.int64), state.cpu_free, rows.sum(axis=1), count_ge, sum_lt
    )
    expected = [fm.frag(state.node_key(i)) for i in range(len(state))]
    assert len(set(expected)) > 10
    assert got.tolist() == pytest.approx(expected, rel=1e-13, abs=1e-9)


def test_fgd_scores_match_the_scalar_truncation_at_integer_boundaries() -> None:
    # delta = 0 gives exactly 50.0, on a boundary: recomputed from the exact delta, which decides.
    deltas = np.array([0.0, -4000.0, 123.456, 5000.0, -0.001, 999.999])
    assert fgd_scores(deltas).tolist() == [fgd_score(float(d)) for d in deltas]
    assert fgd_scores(np.array([0.0]), exact=lambda j: -1e-6).tolist() == [49]
    assert fgd_scores(np.array([0.0]), exact=lambda j: 0.0).tolist() == [50]


def test_two_generation_memo_keeps_at_most_twice_its_capacity_and_promotes_hits() -> None:
    memo: TwoGenerationMemo[int, int] = TwoGenerationMemo(3)
    for k in range(3):
        memo[k] = k * 10
    memo[3] = 30  # young generation full: 0..2 become the old one
    assert memo.get(0) == 0  # found in the old generation and promoted
    for k in range(4, 6):
        memo[k] = k * 10
    assert len(memo) <= 6
    assert memo.get(0) == 0  # promoted, so it survived the turnover
    assert memo.get(1) is None  # never used again: dropped
    for k in range(100, 1000):
        memo[k] = k
    assert len(memo) <= 6


def test_lru_tables_drop_the_least_recently_used_value() -> None:
    tables: LruTables[str, list[int]] = LruTables(2)
    a = tables.get_or_create("a", lambda: [1])
    tables.get_or_create("b", lambda: [2])
    assert tables.get_or_create("a", lambda: [9]) is a  # "a" used again: "b" is now the oldest
    tables.get_or_create("c", lambda: [3])
    assert len(tables) == 2
    assert tables.get_or_create("b", lambda: [4]) == [4]  # "b" was dropped and is rebuilt


def test_score_caches_stay_bounded_over_many_request_shapes() -> None:
    state = cluster(*(node(f"n{i}", 8, cpu=1_000_000) for i in range(4)))
    pol = POLICIES["tessera"](typical=TYPICAL)
    assert isinstance(pol, FgdPolicy)
    pol._tables.capacity = 5
    pol.memo_scoring_up_to = 0  # the vectorised pass: the tables are the only score cache
    for j in range(40):
        r = PlacementRequest(str(j), cpu_milli=100 + j, memory_mib=1, gpu_count=1, gpu_milli=10)
        place_one(state, r, pol)
    assert len(pol._tables) == 5
    assert pol.cache_nbytes() < 5 * 4 * 64 + 4096


def test_the_per_node_score_memo_stays_bounded_over_many_request_shapes() -> None:
    state = cluster(*(node(f"n{i}", 8, cpu=1_000_000) for i in range(4)))
    pol = POLICIES["tessera"](typical=TYPICAL)
    assert isinstance(pol, FgdPolicy)
    pol._memo.capacity = 8
    for j in range(200):
        r = PlacementRequest(str(j), cpu_milli=100 + j, memory_mib=1, gpu_count=1, gpu_milli=10)
        place_one(state, r, pol)
    assert 8 <= len(pol._memo) <= 16


def test_fragmentation_memo_shares_states_whose_cpu_reaches_the_same_typical_requests() -> None:
    # Issue 18: F sees free CPU only through ``cpu >= c`` against the typical requests (here ... 16000,
    # 32000, 64000), so the states with 16000..31999 free CPU are one memo entry, with the exact value.
    fm = FragModel(TYPICAL, {"A100": 0, "T4": 1, "L40S": 2})
    idle = (0, 250, 1000, 1000)
    keys = [(0, cpu, idle) for cpu in (16000, 20000, 31999)]
    assert [fm.frag(k) for k in keys] == [fm._frag(k) for k in keys]
    assert len(fm._memo) == 1
    assert fm.frag((0, 32000, idle)) == fm._frag((0, 32000, idle))
    assert fm.frag((0, 32000, idle)) != fm.frag((0, 31999, idle))
    assert len(fm._memo) == 2


def test_row_statistics_count_and_sum_per_distinct_typical_milli_exactly() -> None:
    fm = FragModel(TYPICAL, {"A100": 0, "T4": 1, "L40S": 2})
    assert fm.stat_milli.tolist() == [0, 80, 250, 500, 1000]
    rows = np.array([[0, 80, 1000, 999], [250, 250, 500, 0], [1000, 1000, 1000, 1000]], np.int64)
    count_ge, sum_lt = fm.row_stats(rows)
    for r, row in enumerate(rows.tolist()):
        for u, m in enumerate(fm.stat_milli.tolist()):
            assert count_ge[r, u] == sum(g >= m for g in row)
            assert sum_lt[r, u] == sum(g for g in row if g < m)
    assert count_ge.dtype == sum_lt.dtype == np.int64
