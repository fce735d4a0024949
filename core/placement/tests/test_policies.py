"""Every policy: its documented score on small hand-made clusters."""

from __future__ import annotations

import numpy as np
import pytest

from core.placement import POLICIES, PlacementRequest, TypicalPod, place_one
from core.placement.fragmentation import FragModel, typical_pods
from core.placement.policies.bestfit import normalize
from core.placement.policies.fgd import fgd_score
from core.placement.policies.tessera import cpu_fragment, cpu_per_gpu_milli, model_pressure

from .builders import cluster, node, req

ALL = sorted(POLICIES)


def _place(policy: str, state, r: PlacementRequest, prio=None, typical=()):  # type: ignore[no-untyped-def]
    pol = POLICIES[policy](typical=typical, seed=1)
    return place_one(state, r, pol, None if prio is None else np.asarray(prio, np.int64))


@pytest.mark.parametrize("policy", ALL)
def test_every_policy_places_a_slice_whole_gpus_and_cpu_only(policy: str) -> None:
    s = cluster(node("a", 4), node("b", 2))
    typical = typical_pods([req("t", gpus=1, milli=500)])
    for r in (req("s", gpus=1, milli=500), req("w", gpus=2, milli=1000), req("c", cpu=2000)):
        a = _place(policy, s, r, typical=typical)
        assert a is not None, (policy, r)
        if r.is_whole_gpu:
            assert len(a.gpu_indices) == 2
    assert s.allocated_gpu_milli == 2500


@pytest.mark.parametrize("policy", ALL)
def test_every_policy_returns_none_when_nothing_fits(policy: str) -> None:
    s = cluster(node("a", 1))
    assert _place(policy, s, req("x", gpus=2, milli=1000)) is None


def test_firstfit_takes_the_lowest_priority_node_and_tightest_gpu() -> None:
    s = cluster(node("a", 2), node("b", 2))
    s.apply(_assign("pre", "b", 1, 600))
    a = _place("firstfit", s, req("r", gpus=1, milli=300), prio=[5, 1])
    assert (a.node, a.gpu_indices) == ("b", (1,))


def _assign(rid: str, n: str, gpu: int, milli: int):  # type: ignore[no-untyped-def]
    from core.placement import Assignment

    return Assignment(rid, n, (gpu,), milli, 0, 0, 0)


def test_bestfit_prefers_least_leftover() -> None:
    s = cluster(node("big", 8, cpu=96000), node("small", 2, cpu=16000))
    a = _place("bestfit", s, req("r", cpu=4000, gpus=1, milli=500))
    assert a.node == "small"


def test_bestfit_normalisation_is_integer_min_max() -> None:
    assert normalize(np.array([10, 20, 15], np.int64)).tolist() == [0, 100, 50]
    assert normalize(np.array([7, 7], np.int64)).tolist() == [0, 0]


def test_dotproduct_prefers_small_dot_product() -> None:
    s = cluster(node("big", 8, cpu=96000), node("small", 2, cpu=16000))
    a = _place("dotproduct", s, req("r", cpu=4000, gpus=1, milli=500))
    assert a.node == "small"


def test_gpupacking_fills_partly_used_gpu_first() -> None:
    s = cluster(node("a", 2), node("b", 2))
    s.apply(_assign("pre", "b", 1, 500))
    a = _place("gpupacking", s, req("r", gpus=1, milli=300), prio=[0, 1])
    assert (a.node, a.gpu_indices) == ("b", (1,))


def test_gpuclustering_groups_same_tag() -> None:
    s = cluster(node("a", 4), node("b", 4))
    s.apply(_assign("pre", "b", 0, 500))
    a = _place("gpuclustering", s, req("r", gpus=1, milli=200), prio=[0, 1])
    assert a.node == "b"


def test_random_is_seeded_and_feasible() -> None:
    def run(seed: int) -> list[str]:
        s = cluster(*(node(f"n{i}", 2) for i in range(6)))
        pol = POLICIES["random"](seed=seed)
        out = []
        for k in range(8):
            a = place_one(s, req(f"r{k}", gpus=1, milli=400), pol)
            out.append(a.node if a else "")
        return out

    assert run(3) == run(3)


def test_fgd_score_is_truncated_sigmoid() -> None:
    assert fgd_score(0.0) == 50
    assert fgd_score(-1e-9) == 49
    assert fgd_score(10_000.0) == 99
    assert fgd_score(-10_000.0) == 0


def test_fragmentation_counts_unusable_idle_gpu() -> None:
    typical = [TypicalPod(1000, 500, 1, "", 1.0)]
    fm = FragModel(typical, {"A100": 0})
    # GPUs with 300 and 1000 milli idle: only the 300 is a fragment for a 500m pod
    assert fm.frag((0, 8000, (300, 1000))) == 300.0
    # no CPU left: every idle GPU is a fragment
    assert fm.frag((0, 0, (300, 1000))) == 1300.0


def test_typical_pods_keep_95_percent_and_renormalise() -> None:
    reqs = [req(f"a{i}", gpus=1, milli=500) for i in range(90)]
    reqs += [req(f"b{i}", gpus=1, milli=1000) for i in range(8)]
    reqs += [req(f"c{i}", cpu=3000) for i in range(2)]
    t = typical_pods(reqs)
    assert [(x.gpu_milli, round(x.freq, 4)) for x in t] == [(500, 0.9184), (1000, 0.0816)]


def test_fgd_puts_a_slice_where_it_fragments_least() -> None:
    typical = [TypicalPod(1000, 600, 1, "", 1.0)]
    s = cluster(node("a", 1), node("b", 1))
    # b has 500 left, a fragment for 600m pods; filling it removes the fragment, while using a creates one
    s.apply(_assign("pre", "b", 0, 500))
    a = _place("fgd", s, req("r", gpus=1, milli=500), prio=[0, 1], typical=typical)
    assert a.node == "b"


def test_model_pressure_is_zero_without_constraints_and_max_one() -> None:
    free = [TypicalPod(1000, 500, 1, "", 1.0)]
    assert model_pressure(free, {"A": 8, "B": 8}, {"A": 0, "B": 1}) == {0: 0.0, 1: 0.0}
    typ = [TypicalPod(1000, 1000, 1, "B", 0.5), TypicalPod(1000, 500, 1, "", 0.5)]
    assert model_pressure(typ, {"A": 8, "B": 8}, {"A": 0, "B": 1}) == {0: 0.0, 1: 1.0}


def test_tessera_keeps_unconstrained_pods_off_a_pressed_model() -> None:
    typical = (TypicalPod(1000, 1000, 1, "T4", 0.5), TypicalPod(1000, 1000, 1, "", 0.5))
    s = cluster(node("t4", 2, model="T4"), node("g2", 2, model="G2"))
    a = _place("tessera", s, req("r", gpus=1, milli=1000), prio=[0, 1], typical=typical)
    assert a.node == "g2"
    b = _place("fgd", s.copy(), req("r", gpus=1, milli=1000), prio=[0, 1], typical=typical)
    assert b is not None


def test_tessera_prefers_an_opened_node_on_equal_fgd_score() -> None:
    typical = (TypicalPod(1000, 1000, 1, "", 1.0),)
    s = cluster(node("idle", 4), node("used", 4))
    s.apply(_assign("pre", "used", 0, 1000))
    a = _place("tessera", s, req("r", gpus=1, milli=1000), prio=[0, 1], typical=typical)
    assert a.node == "used"


def test_cpu_fragment_is_idle_gpu_milli_the_free_cpu_cannot_back() -> None:
    typical = (
        TypicalPod(4000, 1000, 1, "", 0.5),
        TypicalPod(2000, 500, 2, "", 0.5),
        TypicalPod(8000, 0, 0, "", 1.0),
    )
    # CPU-only typical pods are ignored: (0.5·4000 + 0.5·2000) / (0.5·1000 + 0.5·1000) = 3 CPU milli per GPU milli
    rho = cpu_per_gpu_milli(typical)
    assert rho == 3.0
    assert cpu_per_gpu_milli((TypicalPod(8000, 0, 0, "", 1.0),)) == 0.0
    # 2000 idle GPU milli, 3000 CPU backs 1000 of them
    assert cpu_fragment((0, 3000, (1000, 1000)), rho) == 1000.0
    assert cpu_fragment((0, 9000, (1000, 1000)), rho) == 0.0
    assert cpu_fragment((0, 0, (1000, 1000)), 0.0) == 0.0


def test_tessera_keeps_cpu_only_pods_off_a_gpu_node_whose_cpu_is_tight() -> None:
    # GPU pods need 4 CPU cores per GPU; "tight" has 8 GPUs and 36 cores, "roomy" 8 GPUs and 64 cores
    typical = (TypicalPod(4000, 1000, 1, "", 0.9), TypicalPod(8000, 0, 0, "", 0.1))
    s = cluster(node("tight", 8, cpu=36000), node("roomy", 8, cpu=64000))
    r = req("c", cpu=8000)
    # FGD's F is blind to it (both nodes still fit every typical pod afterwards): priority decides
    assert _place("fgd", s.copy(), r, prio=[0, 1], typical=typical).node == "tight"
    # Tessera: on "tight" 28 cores back only 7 of 8 GPUs; on "roomy" 56 cores still back all 8
    assert _place("tessera", s, r, prio=[0, 1], typical=typical).node == "roomy"
