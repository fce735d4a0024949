"""MIG invariants, property-tested with hypothesis over random cards, layouts and request batches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.placement.mig import (
    MigCard,
    MigInstance,
    MigLayoutMode,
    MigPolicy,
    MigRequest,
    plan_mig,
)
from core.placement.mig_profiles import MIG_GEOMETRIES
from core.units import MIG_COMPUTE_SLICES

MODELS = tuple(MIG_GEOMETRIES)
ALL_PROFILES = sorted({p.name for g in MIG_GEOMETRIES.values() for p in g.profiles})


@st.composite
def layouts(draw: st.DrawFn, model: str) -> tuple[MigInstance, ...]:
    """A valid layout: random profiles at random valid positions, skipping those that would overlap."""
    geometry = MIG_GEOMETRIES[model]
    occupied = 0
    out = []
    for _ in range(draw(st.integers(0, 7))):
        profile = draw(st.sampled_from(geometry.profiles))
        start = draw(st.sampled_from(profile.starts))
        mask = profile.mask(start)
        if occupied & mask:
            continue
        occupied |= mask
        out.append(MigInstance(profile.name, start, draw(st.booleans())))
    return tuple(out)


@st.composite
def cards(draw: st.DrawFn) -> list[MigCard]:
    out = []
    for i in range(draw(st.integers(1, 6))):
        model = draw(st.sampled_from(MODELS))
        out.append(
            MigCard(
                f"n{i // 2}",
                i % 2,
                model,
                draw(st.sampled_from(tuple(MigLayoutMode))),
                draw(layouts(model)),
                healthy=draw(st.integers(0, 5)) > 0,
            )
        )
    return out


requests = st.lists(
    st.builds(
        MigRequest,
        request_id=st.uuids().map(str),
        profile=st.sampled_from([*ALL_PROFILES, "9g.90gb"]),
        priority=st.integers(0, 2),
    ),
    min_size=1,
    max_size=20,
    unique_by=lambda r: r.request_id,
)


def final_layouts(
    batch: list[MigCard], plan_result: object
) -> dict[tuple[str, int], list[MigInstance]]:
    """Each card's instances after the plan: inventory, minus destroyed, plus created."""
    plan = plan_result
    layout = {(c.node, c.gpu_index): list(c.instances) for c in batch}
    for r in plan.reconfigurations:  # type: ignore[attr-defined]
        for inst in r.destroy:
            layout[(r.node, r.gpu_index)].remove(inst)
        layout[(r.node, r.gpu_index)].extend(r.create)
    return layout


@settings(max_examples=200, deadline=None)
@given(cards(), requests, st.sampled_from(tuple(MigPolicy)))
def test_no_two_instances_overlap_and_every_position_is_valid(
    batch: list[MigCard], reqs: list[MigRequest], policy: MigPolicy
) -> None:
    plan = plan_mig(batch, reqs, policy=policy)
    models = {(c.node, c.gpu_index): c.model for c in batch}
    for key, instances in final_layouts(batch, plan).items():
        geometry = MIG_GEOMETRIES[models[key]]
        occupied = 0
        compute = 0
        for inst in instances:
            profile = geometry.profile(inst.profile)
            assert profile is not None, (key, inst)
            assert inst.start in profile.starts
            assert occupied & profile.mask(inst.start) == 0, (key, instances)
            occupied |= profile.mask(inst.start)
            compute += profile.compute_slices
        assert compute <= MIG_COMPUTE_SLICES
    for p in plan.placements:
        profile = MIG_GEOMETRIES[models[(p.node, p.gpu_index)]].profile(p.profile)
        assert profile is not None
        assert p.start in profile.starts


@settings(max_examples=200, deadline=None)
@given(cards(), requests, st.sampled_from(tuple(MigPolicy)))
def test_layouts_change_only_on_dynamic_cards_and_are_replaced_only_when_empty(
    batch: list[MigCard], reqs: list[MigRequest], policy: MigPolicy
) -> None:
    plan = plan_mig(batch, reqs, policy=policy)
    by_key = {(c.node, c.gpu_index): c for c in batch}
    for r in plan.reconfigurations:
        card = by_key[(r.node, r.gpu_index)]
        assert card.mode is MigLayoutMode.DYNAMIC
        assert card.healthy
        if r.destroy:
            assert not any(i.in_use for i in card.instances)
        assert not any(i.in_use for i in r.destroy)
    for p in plan.placements:
        card = by_key[(p.node, p.gpu_index)]
        assert card.healthy
        if card.mode is MigLayoutMode.STATIC:
            assert not p.reconfigure
            assert MigInstance(p.profile, p.start, False) in card.instances


@settings(max_examples=150, deadline=None)
@given(cards(), requests, st.sampled_from(tuple(MigPolicy)))
def test_every_request_is_placed_or_unplaced_once_and_plans_are_deterministic(
    batch: list[MigCard], reqs: list[MigRequest], policy: MigPolicy
) -> None:
    plan = plan_mig(batch, reqs, policy=policy)
    ids = [p.request_id for p in plan.placements] + [u.request_id for u in plan.unplaced]
    assert sorted(ids) == sorted(r.request_id for r in reqs)
    assert plan == plan_mig(list(reversed(batch)), list(reversed(reqs)), policy=policy)
