"""The decide step of a scheduling cycle: an in-memory snapshot in, a decision out, no database.

`decide(CycleInput) -> CycleDecision` is the whole of a cycle's judgement (Ray autoscaler v2's
`schedule()`, the Kubernetes scheduler framework's filter/score: data in, data out):

1. **units**: a workload alone, or the pending members of one gang that must be placed together now
   (`min_available` minus its active members); a gang already complete places its members one by one;
2. **order**: highest priority first, then the quota that used least of its decayed fair share over time
   (`QuotaSpec.fair_share`, data in `CycleInput.quota`; all equal when the group has it off), then the
   quota furthest below its runtime share now, then the oldest submission, then the id;
3. **admit** every unit through one `quotas.admission.AdmissionSession` (the rules the picker and the
   what-if preview use); refused units wait with the quota's reason;
4. **plan** the admitted units with the engine on a copy of the shard's engine state (gangs all or
   nothing); admitted members the engine could not place are given back to the session;
5. **reclaim**: the first admitted unit that found no capacity (every unplaced member refused for a
   capacity reason, `UnplacedReason.is_capacity`) takes back capacity lent to sibling quotas
   (`quotas.reclaim.plan_reclaim`: whole gangs, preemptible, over their runtime share); one claim per
   cycle, so nothing is stopped twice for one request;
6. **waiting**: everything not placed gets a code, a reason with numbers and its position in the
   shard's queue.

Reclaim plans on the group's workloads one by one (`CycleInput.workloads`), which the cycle reads only
when a unit needs it: `propose` runs steps 1–4, `conclude` steps 5–6, and `decide` is the two in one.
On a large cluster the cycle gives `conclude` the running work summed instead, with `WorkloadRows`
to read the running workloads of the nodes reclaim looks at (the first few, usually), one by one.
`scheduling.services.cycle` builds the input from the database and applies the decision in one
transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from core.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    GangSpec,
    GangTopology,
    PlacementRequest,
    TopologyLevel,
    Unplaced,
    typical_pods,
)
from core.placement.mig import (
    MigCard,
    MigInstance,
    MigLayoutMode,
    MigRequest,
    plan_mig,
    request_order,
)
from core.placement.planner import plan_in_place, queue_key
from core.placement.types import UnplacedReason
from core.units import mig_compute_slices
from quotas.admission import Admission, AdmissionSession
from quotas.reclaim import Victim, may_reclaim, plan_reclaim, reclaimable, with_whole_gangs
from quotas.resources import Resources, Side
from quotas.usage import GroupSnapshot, WorkloadUsage
from scheduling.services.reclaim_fit import NoFit, choose_by_node


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    """A PENDING workload as the cycle decides about it."""

    usage: WorkloadUsage
    request: PlacementRequest
    submitted_at: datetime
    gang_min_available: int = 0
    mig_profile: str = ""
    """A MIG profile (``1g.10gb``): placed on a MIG card by `core.placement.mig`, not as a slice."""
    gang_topology: GangTopology | None = None
    """The gang's co-location request (all its pending members in one domain of a topology level)."""

    @property
    def workload_id(self) -> int:
        return self.usage.workload_id


@dataclass(frozen=True, slots=True)
class CycleInput:
    """Everything one cycle of a shard decides from, read at one moment.

    `pending`: the PENDING workloads considered (already part of `quota`'s pending demand);
    `quota`: the group's snapshot to admit against (summed usage is enough);
    `cluster`: the engine state of the shard's nodes with current placements applied (never mutated);
    `recent`: the shapes of the shard's last placements (with the pending ones: FGD's target workload);
    `gang_active`: per gang id, how many members are active (placed or running) already;
    `workloads`: the group's snapshot with its workloads one by one, for reclaim (None: no reclaim);
    `protect_started_after`: see the field.
    """

    pending: tuple[PendingWorkload, ...]
    quota: GroupSnapshot
    cluster: ClusterState
    policy: str = "tessera"
    recent: tuple[PlacementRequest, ...] = ()
    gang_active: Mapping[int, int] = field(default_factory=dict)
    workloads: GroupSnapshot | None = None
    protect_started_after: datetime | None = None
    """Minimum runtime before preemption: reclaim never stops work that started after this moment
    (`now - QuotaGroup.min_runtime_seconds`, set by the cycle; None = no protection)."""

    mig_cards: tuple[MigCard, ...] = ()
    """The shard's MIG cards with their instances in use (a `mig` pool; empty elsewhere)."""

    mig_relayout_cards: frozenset[tuple[str, int]] = frozenset()
    """(node, GPU index) of the empty dynamic cards whose new instances need a reconfiguration step
    (`Gpu.mig_dynamic`): a placement that creates an instance there waits for it."""

    topology_levels: tuple[TopologyLevel, ...] = ()
    """The pool's cross-node topology, widest first (for gangs with a `gang_topology`)."""

    running: Mapping[int, Assignment] = field(default_factory=dict)
    """Per active workload id, its placement on `cluster`: reclaim chooses its victims node by node
    (`scheduling.services.reclaim_fit`). Empty: victims by quota share alone (no node is known)."""


class WorkloadRows(Protocol):
    """The group's workloads one by one, read as reclaim needs them (the cycle's reader is
    `scheduling.services.quota_bridge.ReclaimRows`; `SnapshotRows` serves them from a snapshot)."""

    def active(self, ids: Collection[int], gangs: Collection[int]) -> Sequence[WorkloadUsage]:
        """The active workloads among `ids`, and every active member of their gangs and of `gangs`."""
        ...

    def lowest(self, other_than: int) -> tuple[int, int] | None:
        """(lowest priority, least GPU milli at it) of active preemptible work outside quota
        `other_than`; None when there is none."""
        ...

    def one_by_one(self) -> GroupSnapshot:
        """The group's snapshot with every live workload one by one."""
        ...


@dataclass(frozen=True)
class SnapshotRows:
    """`WorkloadRows` of a snapshot that already holds every workload one by one."""

    snapshot: GroupSnapshot

    def active(self, ids: Collection[int], gangs: Collection[int]) -> Sequence[WorkloadUsage]:
        running = [w for w in self.snapshot.workloads if w.active]
        pairs = [(w.workload_id, w.gang_id) for w in running]
        wanted = set(ids) | {wid for wid, gang_id in pairs if gang_id and gang_id in gangs}
        keep = set(with_whole_gangs(wanted, pairs))
        return [w for w in running if w.workload_id in keep]

    def lowest(self, other_than: int) -> tuple[int, int] | None:
        return _lowest(w for w in self.snapshot.workloads if w.active and w.quota_id != other_than)

    def one_by_one(self) -> GroupSnapshot:
        return self.snapshot


def _lowest(workloads: Any) -> tuple[int, int] | None:
    keys = [(w.priority, w.resources.gpu_milli) for w in workloads if w.preemptible]
    return min(keys) if keys else None


@dataclass(frozen=True, slots=True)
class MigSlot:
    """Where a MIG workload's instance is: the card (node, GPU index), the profile and its position."""

    node: str
    gpu_index: int
    profile: str
    start: int
    reconfigure: bool = False
    """The instance is created by the card's reconfiguration in this cycle: the workload waits for it."""


@dataclass(frozen=True, slots=True)
class MigRelayout:
    """The plan of one dynamic card's new MIG layout (data, applied by
    `scheduling.services.mig_reconfig`): the layout it has now and the one its waiting workloads need,
    as ``(profile, start)`` pairs in start order."""

    node: str
    gpu_index: int
    old_layout: tuple[tuple[str, int], ...]
    new_layout: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a workload still waits: a stable `code`, a `reason` with numbers, its place in the queue."""

    code: str
    reason: str
    position: int


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Capacity to take back for `claimant_ids` (one unit): the victims to stop, in order."""

    claimant_ids: tuple[int, ...]
    message: str
    victims: tuple[Victim, ...]
    placements: tuple[Assignment, ...] = ()
    """Where the claimant goes once exactly these victims have stopped (the engine's plan on the
    cycle's state with them released; empty when victims were chosen by quota share alone): the cycle
    that stops them all at once places the claimant in the same transaction."""

    @property
    def victim_ids(self) -> tuple[int, ...]:
        return tuple(sorted({i for victim in self.victims for i in victim.workload_ids}))


@dataclass(frozen=True, slots=True)
class Unit:
    """A workload alone, or the pending members of one gang (admitted and placed together)."""

    members: tuple[PendingWorkload, ...]
    gang_need: int = 0
    """Members that must be placed now for the gang to be complete (0 = no gang)."""

    @property
    def head(self) -> PendingWorkload:
        return self.members[0]

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(m.workload_id for m in self.members)


@dataclass(frozen=True)
class Proposal:
    """Steps 1–4 of a cycle: the ordered units, the admission refusals, the engine's plan."""

    units: tuple[Unit, ...]
    admitted: tuple[Unit, ...]
    refused: Mapping[int, Admission]
    placements: tuple[Assignment, ...]
    unplaced: Mapping[int, Unplaced]
    state: ClusterState
    requests: tuple[PlacementRequest, ...]
    mig: Mapping[int, MigSlot] = field(default_factory=dict)
    mig_relayouts: tuple[MigRelayout, ...] = ()
    running: Mapping[int, Assignment] = field(default_factory=dict)
    """The cycle's `running` placements plus this cycle's own (where each active workload is)."""
    policy: str = "tessera"
    topology_levels: tuple[TopologyLevel, ...] = ()

    @property
    def reclaim_candidates(self) -> tuple[Unit, ...]:
        """Admitted units the engine left waiting for capacity only: reclaim may help them."""
        return tuple(u for u in self.admitted if _waits_for_capacity(u, self.unplaced))


@dataclass(frozen=True)
class CycleDecision:
    """What one cycle does: the placements to write, who waits and why, what to reclaim.

    `state` is the engine state with the placements applied (the shard's next snapshot once they are
    committed); `placed_requests` the engine requests of the placements (the shard's recent shapes)."""

    placements: tuple[Assignment, ...]
    waiting: Mapping[int, Waiting]
    reclaim: Reclaim | None
    admitted: int
    refused: int
    state: ClusterState = field(repr=False)
    placed_requests: tuple[PlacementRequest, ...] = field(default=(), repr=False)
    mig: Mapping[int, MigSlot] = field(default_factory=dict)
    """Per placed MIG workload id, its instance (card and position)."""
    mig_relayouts: tuple[MigRelayout, ...] = ()
    """The dynamic cards this cycle reconfigures (their workloads in `mig` wait for READY)."""

    @property
    def placed_ids(self) -> tuple[int, ...]:
        return tuple(int(a.request_id) for a in self.placements)


def decide(cycle: CycleInput) -> CycleDecision:
    """The decision of one cycle (see the module docstring). Pure and deterministic."""
    return conclude(
        propose(cycle), cycle.workloads, protect_started_after=cycle.protect_started_after
    )


def propose(cycle: CycleInput) -> Proposal:
    """Steps 1–4: units, order, admission, the engine's plan."""
    session = AdmissionSession(cycle.quota)
    units = sorted(_units(cycle.pending, cycle.gang_active), key=lambda u: _order(session, u))
    refused: dict[int, Admission] = {}
    admitted: list[Unit] = []
    for unit in units:
        answer = session.admit([m.usage for m in unit.members], counted=True)
        if answer.allowed:
            admitted.append(unit)
        else:
            refused.update(dict.fromkeys(unit.ids, answer))
    mig_members = [m for u in admitted for m in u.members if m.mig_profile]
    requests = tuple(m.request for u in admitted for m in u.members if not m.mig_profile)
    gangs = [
        GangSpec(
            u.head.usage.gang_name or str(u.head.usage.gang_id),
            tuple(map(str, u.ids)),
            u.gang_need,
            u.head.gang_topology,
        )
        for u in admitted
        if u.gang_need > 0 and not any(m.mig_profile for m in u.members)
    ]
    # The target workload of FGD/Tessera: the shard's recent and pending request shapes (stable from one
    # small cycle to the next, unlike the few requests of one cycle alone).
    typical = typical_pods([*cycle.recent, *requests])
    state = cycle.cluster.copy()
    plan = plan_in_place(
        state,
        list(requests),
        policy=cycle.policy,
        gangs=gangs,
        typical=typical,
        topology_levels=cycle.topology_levels,
    )
    unplaced = {int(u.request_id): u for u in plan.unplaced}
    placements = list(plan.placements)
    mig: dict[int, MigSlot] = {}
    relayouts: tuple[MigRelayout, ...] = ()
    if mig_members:
        gang_needs = {
            m.workload_id: (u.ids, u.gang_need)
            for u in admitted
            if u.gang_need > 0
            for m in u.members
            if m.mig_profile
        }
        placed_mig, relayouts = _plan_mig(
            state, cycle.mig_cards, mig_members, unplaced, gang_needs, cycle.mig_relayout_cards
        )
        for assignment, slot in placed_mig:
            placements.append(assignment)
            mig[int(assignment.request_id)] = slot
        requests = (*requests, *(m.request for m in mig_members))
    for unit in admitted:
        session.unadmit([m.usage for m in unit.members if m.workload_id in unplaced])
    return Proposal(
        units=tuple(units),
        admitted=tuple(admitted),
        refused=refused,
        placements=tuple(placements),
        unplaced=unplaced,
        state=state,
        requests=requests,
        mig=mig,
        mig_relayouts=relayouts,
        running={**cycle.running, **{int(a.request_id): a for a in placements}}
        if cycle.running
        else {},
        policy=cycle.policy,
        topology_levels=cycle.topology_levels,
    )


def conclude(
    proposal: Proposal,
    workloads: GroupSnapshot | None,
    *,
    protect_started_after: datetime | None = None,
    rows: WorkloadRows | None = None,
) -> CycleDecision:
    """Steps 5–6: the reclaim claim (work started after `protect_started_after` is protected) and
    everyone's waiting reason and position. Reclaim reads `workloads`: the group's workloads one by
    one, or, with `rows`, the snapshot whose running work may be summed (its pending work one by one)
    and `rows` to read the running workloads reclaim weighs."""
    claim = None
    no_room: dict[int, str] = {}
    if workloads is not None and proposal.reclaim_candidates:
        claim = _reclaim(
            proposal,
            _with_placements(workloads, proposal),
            rows if rows is not None else SnapshotRows(workloads),
            protect_started_after,
            no_room,
        )
    placed = {int(a.request_id) for a in proposal.placements}
    waiting: dict[int, Waiting] = {}
    position = 0
    for unit in proposal.units:
        for m in unit.members:
            wid = m.workload_id
            if wid in placed:
                continue
            position += 1
            if wid in proposal.refused:
                code, reason = proposal.refused[wid].code, proposal.refused[wid].reason
            elif claim is not None and wid in claim.claimant_ids:
                code, reason = "reclaiming", claim.message
            else:
                code, reason = proposal.unplaced[wid].reason.value, proposal.unplaced[wid].message
                if wid in no_room:
                    reason = f"{reason} ({no_room[wid]})"
            waiting[wid] = Waiting(code, reason, position)
    return CycleDecision(
        placements=proposal.placements,
        waiting=waiting,
        reclaim=claim,
        admitted=sum(len(u.members) for u in proposal.admitted),
        refused=len(proposal.refused),
        state=proposal.state,
        placed_requests=tuple(r for r in proposal.requests if int(r.request_id) in placed),
        mig=proposal.mig,
        mig_relayouts=proposal.mig_relayouts,
    )


def _plan_mig(
    state: ClusterState,
    cards: Sequence[MigCard],
    members: Sequence[PendingWorkload],
    unplaced: dict[int, Unplaced],
    gangs: Mapping[int, tuple[tuple[int, ...], int]] | None = None,
    relayout_cards: frozenset[tuple[str, int]] = frozenset(),
) -> tuple[list[tuple[Assignment, MigSlot]], tuple[MigRelayout, ...]]:
    """Place MIG workloads with the MIG engine (card + position), one by one in the engine's order
    (priority, larger profiles first, id), each only on nodes with room for its CPU and memory, and apply
    them to `state`: the card's share is the instance's GPU-equivalent (quotas.sharing: compute slices of
    seven, rounded down, so seven 1g instances never count as more than one card). Those left waiting go
    into `unplaced` with the engine's reason.

    A gang's MIG members (`gangs`: workload id -> the gang's ids and how many must be placed now) are one
    block, placed at the position of its first member in that order: all its members are tried, and
    unless at least the needed number fit, none is kept (their instances and `state` are given back) and
    every member waits with the gang's reason.

    On a card of `relayout_cards` (empty, dynamic, reconfigured by a planned step) the instances the
    engine creates make one new layout per card (`MigRelayout`, with the engine's destroys applied); a
    free existing instance taken there first fixes the card's layout for the rest of the cycle (its
    workload starts now, so no reconfiguration may follow it)."""
    gangs = gangs or {}
    by_id = {str(m.workload_id): m for m in members}
    sizes = {m.mig_profile: mig_compute_slices(m.mig_profile) for m in members}
    requests = [MigRequest(str(m.workload_id), m.mig_profile, m.usage.priority) for m in members]
    blocks: list[list[MigRequest]] = []
    block_of: dict[tuple[int, ...], list[MigRequest]] = {}
    for request in request_order(requests, sizes):
        gang = gangs.get(int(request.request_id))
        if gang is None:
            blocks.append([request])
        elif gang[0] in block_of:
            block_of[gang[0]].append(request)
        else:
            block_of[gang[0]] = [request]
            blocks.append(block_of[gang[0]])
    current = list(cards)
    out: list[tuple[Assignment, MigSlot]] = []
    for block in blocks:
        before = current
        placed: list[tuple[Assignment, MigSlot]] = []
        waiting: dict[int, Unplaced] = {}
        for request in block:
            member = by_id[request.request_id]
            found = _place_one_mig(state, current, member, request)
            if isinstance(found, Unplaced):
                waiting[member.workload_id] = found
                continue
            assignment, slot, destroyed = found
            state.apply(assignment)
            placed.append((assignment, slot))
            current = [
                _with_instance(c, slot, destroyed, (c.node, c.gpu_index) in relayout_cards)
                if (c.node, c.gpu_index) == (slot.node, slot.gpu_index)
                else c
                for c in current
            ]
        gang = gangs.get(int(block[0].request_id))
        if gang is not None and len(placed) < gang[1]:
            for assignment, _slot in placed:
                state.release(assignment)
            current = before
            message = (
                f"MIG gang: only {len(placed)} of the {gang[1]} instances it needs together fit now"
            )
            for request in block:
                unplaced[int(request.request_id)] = Unplaced(
                    request.request_id, UnplacedReason.INSUFFICIENT_GPU, message
                )
            continue
        unplaced.update(waiting)
        out.extend(placed)
    return out, _relayouts(cards, current, out, relayout_cards)


def _with_instance(
    card: MigCard, slot: MigSlot, destroyed: tuple[MigInstance, ...], relayout: bool
) -> MigCard:
    """`card` with the instance `slot` holds (and the engine's destroys gone). On a relayout card a free
    existing instance taken (no reconfiguration) fixes the layout: the card is static from now on."""
    gone = {(d.profile, d.start) for d in destroyed}
    kept = [i for i in card.instances if (i.profile, i.start) not in gone]
    if slot.reconfigure:
        kept.append(MigInstance(slot.profile, slot.start, True))
    else:
        at = next(
            n
            for n, i in enumerate(kept)
            if (i.profile, i.start) == (slot.profile, slot.start) and not i.in_use
        )
        kept[at] = replace(kept[at], in_use=True)
    mode = MigLayoutMode.STATIC if relayout and not slot.reconfigure else card.mode
    return replace(card, instances=tuple(kept), mode=mode)


def _relayouts(
    before: Sequence[MigCard],
    after: Sequence[MigCard],
    placed: Sequence[tuple[Assignment, MigSlot]],
    relayout_cards: frozenset[tuple[str, int]],
) -> tuple[MigRelayout, ...]:
    """One new layout per relayout card on which a placement created an instance, in card order."""
    changed = {
        (slot.node, slot.gpu_index)
        for _a, slot in placed
        if slot.reconfigure and (slot.node, slot.gpu_index) in relayout_cards
    }
    old = {(c.node, c.gpu_index): c for c in before}
    out = []
    for card in sorted(after, key=lambda c: (c.node, c.gpu_index)):
        key = (card.node, card.gpu_index)
        if key in changed:
            out.append(
                MigRelayout(
                    card.node,
                    card.gpu_index,
                    _layout(old[key].instances),
                    _layout(card.instances),
                )
            )
    return tuple(out)


def _layout(instances: Sequence[MigInstance]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(((i.profile, i.start) for i in instances), key=lambda p: p[1]))


def _place_one_mig(
    state: ClusterState, cards: Sequence[MigCard], member: PendingWorkload, request: MigRequest
) -> tuple[Assignment, MigSlot, tuple[MigInstance, ...]] | Unplaced:
    """One MIG workload's card and position on `cards`, on a node with room for its CPU and memory."""
    room = tuple(
        sorted(
            name
            for name in {c.node for c in cards}
            if state.node_free(name)["cpu_milli"] >= member.request.cpu_milli
            and state.node_free(name)["memory_mib"] >= member.request.memory_mib
        )
    )
    plan = plan_mig(cards, [replace(request, nodes=room)]) if room else None
    if plan is None or not plan.placements:
        message = (
            plan.unplaced[0].message
            if plan is not None
            else "no MIG node has room for its CPU and memory"
        )
        return Unplaced(
            request.request_id,
            UnplacedReason.INSUFFICIENT_GPU,
            f"MIG {member.mig_profile}: {message}",
        )
    p = plan.placements[0]
    assignment = Assignment(
        request_id=p.request_id,
        node=p.node,
        gpu_indices=(p.gpu_index,),
        gpu_milli=member.request.gpu_milli,
        gpu_memory_mib=member.request.gpu_memory_mib,
        cpu_milli=member.request.cpu_milli,
        memory_mib=member.request.memory_mib,
    )
    destroyed = tuple(i for r in plan.reconfigurations for i in r.destroy)
    return assignment, MigSlot(p.node, p.gpu_index, p.profile, p.start, p.reconfigure), destroyed


def _units(pending: Sequence[PendingWorkload], gang_active: Mapping[int, int]) -> list[Unit]:
    """Pending workloads as units, in input order: a gang's members in one unit while it still needs
    `min_available - active` of them placed together; a complete gang's members one by one."""
    units: list[Unit] = []
    gangs: dict[int, list[PendingWorkload]] = {}
    order: list[int | PendingWorkload] = []
    for m in pending:
        gang_id = m.usage.gang_id
        if not gang_id:
            order.append(m)
        elif gang_id not in gangs:
            gangs[gang_id] = [m]
            order.append(gang_id)
        else:
            gangs[gang_id].append(m)
    for item in order:
        if isinstance(item, PendingWorkload):
            units.append(Unit((item,)))
            continue
        members = gangs[item]
        need = max(0, members[0].gang_min_available - gang_active.get(item, 0))
        if need:
            units.append(Unit(tuple(members), need))
        else:
            units.extend(Unit((m,)) for m in members)
    return units


def _order(session: AdmissionSession, unit: Unit) -> tuple[Any, ...]:
    """Sort key: (highest priority of the unit, its quota's decayed fair-share ratio (0 when the group
    has fair share off), its quota's share ratio on its side now, oldest, id)."""
    head = unit.head
    return queue_key(
        max(m.usage.priority for m in unit.members),
        session.fair_share_ratio(head.usage.quota_id),
        session.share_ratio(head.usage.quota_id, head.usage.side),
        head.submitted_at,
        head.workload_id,
    )


def _waits_for_capacity(unit: Unit, unplaced: Mapping[int, Unplaced]) -> bool:
    why = [unplaced[i] for i in unit.ids if i in unplaced]
    return bool(why) and all(u.reason.is_capacity for u in why)


def _with_placements(workloads: GroupSnapshot, proposal: Proposal) -> GroupSnapshot:
    """The group's workloads as they stand once this cycle's placements are written: each placed one
    active, a whole card charged the memory of the card it got (scheduling.services.charge)."""
    usages = {m.workload_id: m.usage for u in proposal.admitted for m in u.members}
    placed = []
    for a in proposal.placements:
        u = usages[int(a.request_id)]
        if a.gpu_indices and a.gpu_milli >= GPU_MILLI:
            charged = len(a.gpu_indices) * a.gpu_memory_mib
            u = replace(u, resources=replace(u.resources, gpu_memory_mib=charged))
        placed.append(replace(u, active=True))
    return workloads.with_workloads(placed) if placed else workloads


def _reclaim(
    proposal: Proposal,
    workloads: GroupSnapshot,
    rows: WorkloadRows,
    protect_started_after: datetime | None = None,
    no_room: dict[int, str] | None = None,
) -> Reclaim | None:
    """The quota rule: the first unit admitted within its runtime share that found no capacity takes back
    capacity lent to sibling quotas (a gang as one request, all or nothing). When the cycle knows where
    the running work is (`Proposal.running`), the victims are chosen node by node so that the unit can
    place once they stopped (`reclaim_fit.choose_by_node`), and a unit no permitted victims would make
    room for reclaims nothing (why goes into `no_room`, per member id, for its waiting reason)."""
    one_by_one: GroupSnapshot | None = None
    by_node: dict[str, list[int]] | None = None
    for unit in proposal.reclaim_candidates:
        usages = [m.usage for m in unit.members]
        claim = usages if unit.gang_need else usages[0]
        among = None
        shortfall = None
        placements: tuple[Assignment, ...] = ()
        snapshot = workloads
        units_of: Sequence[WorkloadUsage] | None = None
        if proposal.running and not any(m.mig_profile for m in unit.members):
            if not may_reclaim(workloads, claim):
                continue
            if by_node is None:
                by_node = {}
                for wid, a in proposal.running.items():
                    by_node.setdefault(a.node, []).append(wid)
            source = _Permitted(
                workloads,
                claim,
                protect_started_after,
                rows,
                by_node,
                usages[0].quota_id,
                frozenset(int(a.request_id) for a in proposal.placements),
            )
            choice = choose_by_node(
                proposal.state,
                [m.request for m in unit.members],
                unit.gang_need or 1,
                source,
                proposal.running,
                gang=_gang_spec(unit) if unit.gang_need else None,
                policy=proposal.policy,
                topology_levels=proposal.topology_levels,
            )
            if isinstance(choice, NoFit):
                # as when nothing at all is permitted: no reason to add (asked of every node only
                # when the nodes tried had none)
                if no_room is not None and (source.handed or source.rest()):
                    no_room.update(dict.fromkeys(unit.ids, choice.reason))
                continue
            if not choice.victims:
                continue
            among = {i for v in choice.victims for i in v.workload_ids}
            shortfall = _freed(choice.victims)
            placements = choice.placements
            units_of = source.rows_of(among)
        else:
            if one_by_one is None:
                one_by_one = (
                    workloads
                    if isinstance(rows, SnapshotRows)
                    else _with_placements(rows.one_by_one(), proposal)
                )
            snapshot = one_by_one
        plan = plan_reclaim(
            snapshot,
            claim,
            protect_started_after=protect_started_after,
            among=among,
            shortfall=shortfall,
            units_of=units_of,
        )
        if not plan.victims:
            if among is not None and no_room is not None:
                why = "; ".join(c.reason for c in plan.claims if not c.satisfied)
                no_room.update(dict.fromkeys(unit.ids, why or "reclaim would not free enough"))
            continue
        names = ", ".join(v.name for v in plan.victims)
        message = (
            f"Taking back capacity lent to other quotas: stopping {names}; it starts when they have "
            "stopped."
        )
        stopped = {i for v in plan.victims for i in v.workload_ids}
        # the engine's plan holds for the node choice's victims; the quota rules may stop fewer
        return Reclaim(unit.ids, message, plan.victims, placements if stopped == among else ())
    return None


@dataclass
class _Permitted:
    """The units `claim` may take back (`quotas.reclaim.reclaimable`), read node by node as
    `reclaim_fit.choose_by_node` asks for them (`reclaim_fit.Candidates`): the running workloads of
    those nodes (this cycle's placements from `snapshot`, the others through `rows`), each gang whole."""

    snapshot: GroupSnapshot
    claim: Any
    protect_started_after: datetime | None
    rows: WorkloadRows
    by_node: Mapping[str, Sequence[int]]
    quota_id: int
    placed_ids: frozenset[int] = frozenset()
    """This cycle's placements (active in `snapshot`, still pending in the database)."""
    handed: int = 0
    _asked: set[int] = field(default_factory=set)
    _given: set[tuple[Side, int]] = field(default_factory=set)
    _read: dict[int, WorkloadUsage] = field(default_factory=dict)
    _placed: dict[int, WorkloadUsage] | None = None

    def floor(self) -> tuple[int, int, int]:
        lowest = [
            x
            for x in (
                self.rows.lowest(self.quota_id),
                _lowest(u for u in self._placed_now().values() if u.quota_id != self.quota_id),
            )
            if x is not None
        ]
        if not lowest:
            return (0, 0, 0)
        priority, milli = min(lowest)
        return (priority, 1, milli)

    def on(self, nodes: Sequence[str]) -> Sequence[Victim]:
        return self._units([w for node in nodes for w in self.by_node.get(node, ())])

    def rest(self) -> Sequence[Victim]:
        return self._units([w for ids in self.by_node.values() for w in ids])

    def rows_of(self, ids: Collection[int]) -> list[WorkloadUsage]:
        """The rows read so far of the units whose members are `ids` (each gang whole)."""
        gangs = {self._read[i].gang_id for i in ids if i in self._read and self._read[i].gang_id}
        return [u for u in self._read.values() if u.workload_id in ids or u.gang_id in gangs]

    def _placed_now(self) -> dict[int, WorkloadUsage]:
        if self._placed is None:
            ids = self.placed_ids
            self._placed = (
                {w.workload_id: w for w in self.snapshot.workloads if w.workload_id in ids}
                if ids
                else {}
            )
        return self._placed

    def _units(self, ids: Sequence[int]) -> list[Victim]:
        new = [w for w in ids if w not in self._asked]
        if not new:
            return []
        self._asked.update(new)
        placed = self._placed_now()
        here = [placed[w] for w in new if w in placed]
        read = {
            u.workload_id: u
            for u in self.rows.active(
                [w for w in new if w not in placed], {u.gang_id for u in here if u.gang_id}
            )
        }
        gangs = {u.gang_id for u in read.values() if u.gang_id} | {
            u.gang_id for u in here if u.gang_id
        }
        for u in placed.values():
            if u.workload_id in self._asked or (u.gang_id and u.gang_id in gangs):
                read[u.workload_id] = u
        self._read.update(read)
        out = []
        for victim in reclaimable(
            self.snapshot,
            self.claim,
            protect_started_after=self.protect_started_after,
            units_of=list(read.values()),
        ):
            key = (victim.side, victim.workload_ids[0])
            if key not in self._given:
                self._given.add(key)
                out.append(victim)
        self.handed += len(out)
        return out


def _gang_spec(unit: Unit) -> GangSpec:
    return GangSpec(
        unit.head.usage.gang_name or str(unit.head.usage.gang_id),
        tuple(map(str, unit.ids)),
        unit.gang_need,
        unit.head.gang_topology,
    )


def _freed(victims: Sequence[Victim]) -> Resources:
    freed = Resources()
    for v in victims:
        freed = freed + v.freed
    return freed
