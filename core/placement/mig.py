"""MIG placement: which card and which memory-slice position a GPU-instance request gets.

A card in MIG mode is carved into GPU instances; the valid profiles and positions per model come from
:mod:`core.placement.mig_profiles`. Two layout modes:

- ``STATIC``: the operator fixed the layout (inventory reports its instances); a request takes a free instance of
  exactly its profile, Tessera never creates or destroys one.
- ``DYNAMIC``: Tessera owns the layout. A request takes a free instance of its profile, or a new instance is
  created on memory slices no instance holds (this leaves running instances alone); only a card on which no
  instance is in use may have its existing instances destroyed for a new layout. Every create or destroy is a
  :class:`MigReconfiguration`: a planned step with its own state (:class:`ReconfigurationState`) that the apply
  side runs before the placements that need it start.

Scoring (``MigPolicy.PACKING``), lower is better, per candidate (card, position):
``(tier, fragmentation loss, free memory slices left on the card, card order, position)`` where *tier* is 0 for a
free existing instance, 1 for a new instance in unpartitioned slices, 2 for a new layout on an empty card; the
*fragmentation loss* is the sum, over the valid placements of every profile that are free on the card now and
would be blocked by this one, of the blocked profile's compute slices squared, so blocking a ``7g`` or ``4g``
costs far more than blocking a ``1g``: large profiles stay placeable. ``MigPolicy.FIRST_FIT`` takes the first
card (in ``(node, gpu index)`` order) where the request fits and on it the lowest position: the baseline of
``bench/mig.py``.

Pure: numpy and the standard library, no clock, no randomness; the same input gives the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from .mig_profiles import MEMORY_SLICES, MIG_GEOMETRIES, MigGeometry, mig_geometry


class MigLayoutMode(str, Enum):
    """Who decides a card's MIG layout: the operator (``static``) or Tessera (``dynamic``)."""

    STATIC = "static"
    DYNAMIC = "dynamic"


class MigPolicy(str, Enum):
    """How a card and position are chosen (see the module docstring)."""

    PACKING = "packing"
    FIRST_FIT = "first_fit"


class ReconfigurationState(str, Enum):
    """The life of one card's reconfiguration: planned by the engine, applied by the backend."""

    PLANNED = "planned"
    APPLYING = "applying"
    READY = "ready"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: Allowed transitions; READY, FAILED and CANCELLED are final (a failed card is planned again from scratch).
RECONFIGURATION_TRANSITIONS: dict[ReconfigurationState, frozenset[ReconfigurationState]] = {
    ReconfigurationState.PLANNED: frozenset(
        {ReconfigurationState.APPLYING, ReconfigurationState.CANCELLED}
    ),
    ReconfigurationState.APPLYING: frozenset(
        {ReconfigurationState.READY, ReconfigurationState.FAILED}
    ),
    ReconfigurationState.READY: frozenset(),
    ReconfigurationState.FAILED: frozenset(),
    ReconfigurationState.CANCELLED: frozenset(),
}


def advance(state: ReconfigurationState, to: ReconfigurationState) -> ReconfigurationState:
    """The next state of a reconfiguration; ``ValueError`` for a transition the machine does not allow."""
    if to not in RECONFIGURATION_TRANSITIONS[state]:
        raise ValueError(f"a reconfiguration cannot go from {state.value} to {to.value}")
    return to


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One GPU instance on a card: its profile name, start position (memory slice) and whether work uses it."""

    profile: str
    start: int
    in_use: bool = False


@dataclass(frozen=True, slots=True)
class MigCard:
    """One MIG-capable card as inventory reports it: model, layout mode and the instances it has now."""

    node: str
    gpu_index: int
    model: str
    mode: MigLayoutMode = MigLayoutMode.DYNAMIC
    instances: tuple[MigInstance, ...] = ()
    healthy: bool = True


@dataclass(frozen=True, slots=True)
class MigRequest:
    """One workload asking for one GPU instance of ``profile`` (e.g. ``1g.10gb``); ``nodes`` limits where
    (``()`` = anywhere)."""

    request_id: str
    profile: str
    priority: int = 0
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """A placed request: the card, the profile and position of its instance; ``reconfigure`` is True when the
    instance is created by the card's reconfiguration in the same plan (the workload waits for READY)."""

    request_id: str
    node: str
    gpu_index: int
    profile: str
    start: int
    reconfigure: bool


@dataclass(frozen=True, slots=True)
class MigReconfiguration:
    """The planned change of one dynamic card's layout: instances destroyed, then instances created."""

    node: str
    gpu_index: int
    destroy: tuple[MigInstance, ...]
    create: tuple[MigInstance, ...]
    state: ReconfigurationState = ReconfigurationState.PLANNED


class MigUnplacedReason(str, Enum):
    """Why a MIG request was not placed."""

    UNKNOWN_PROFILE = "unknown_profile"
    NO_FREE_POSITION = "no_free_position"


@dataclass(frozen=True, slots=True)
class MigUnplaced:
    """A request left waiting, with a sentence a person can read."""

    request_id: str
    reason: MigUnplacedReason
    message: str


@dataclass(frozen=True, slots=True)
class MigPlan:
    """The outcome of :func:`plan_mig`: every request is placed or unplaced exactly once."""

    placements: tuple[MigPlacement, ...]
    reconfigurations: tuple[MigReconfiguration, ...]
    unplaced: tuple[MigUnplaced, ...]


# ---------------------------------------------------------------- tables (the same shape for every model)
_PROTOTYPE: MigGeometry = MIG_GEOMETRIES["H100-80GB"]
#: (profile index, start, mask, compute slices) of every valid placement, profile by profile.
_PLACEMENTS: tuple[tuple[int, int, int, int], ...] = tuple(
    (k, s, p.mask(s), p.compute_slices) for k, p in enumerate(_PROTOTYPE.profiles) for s in p.starts
)
_N_MASKS = 1 << MEMORY_SLICES
_MASKS = np.array([q[2] for q in _PLACEMENTS], np.int64)
_WEIGHTS = np.array([q[3] ** 2 for q in _PLACEMENTS], np.int64)
#: _FREE[m, q]: placement q fits on a card whose occupied-slice mask is m.
_FREE = (np.arange(_N_MASKS)[:, None] & _MASKS[None, :]) == 0
#: _LOSS[m, q]: weighted placements free on mask m that taking q blocks (only meaningful where _FREE[m, q]).
_LOSS = np.array(
    [
        [
            int(_WEIGHTS[_FREE[m] & ~_FREE[m | int(_MASKS[q])]].sum())
            for q in range(len(_PLACEMENTS))
        ]
        for m in range(_N_MASKS)
    ],
    np.int64,
)
_POPCOUNT = np.array([bin(m).count("1") for m in range(_N_MASKS)], np.int64)
#: Placement indices of each profile index.
_BY_PROFILE: tuple[np.ndarray, ...] = tuple(
    np.array([i for i, q in enumerate(_PLACEMENTS) if q[0] == k], np.int64)
    for k in range(len(_PROTOTYPE.profiles))
)
_FULL = _N_MASKS - 1
_BIG = np.iinfo(np.int64).max


def _profile_shapes_match(geometry: MigGeometry) -> bool:
    """Every supported model shares the prototype's shape (slices, spans, starts); only names differ."""
    return [(p.compute_slices, p.memory_slices, p.starts) for p in geometry.profiles] == [
        (p.compute_slices, p.memory_slices, p.starts) for p in _PROTOTYPE.profiles
    ]


@dataclass(slots=True)
class _Change:
    destroy: list[MigInstance] = field(default_factory=list)
    create: list[MigInstance] = field(default_factory=list)


class MigState:
    """Mutable MIG occupancy of a set of cards, as numpy arrays; :meth:`place` takes one request at a time.

    ``occupied[c]``: memory slices held by any instance on card ``c`` (in use or free); ``used[c]``: slices held
    by instances in use. Free existing instances are kept per card and counted per profile index.
    """

    def __init__(self, cards: Sequence[MigCard]) -> None:
        self.cards = tuple(sorted(cards, key=lambda c: (c.node, c.gpu_index)))
        n = len(self.cards)
        k = len(_PROTOTYPE.profiles)
        self.geometries: list[MigGeometry | None] = []
        self.occupied = np.zeros(n, np.int64)
        self.used = np.zeros(n, np.int64)
        self.free_count = np.zeros((n, k), np.int64)
        self.free_instances: list[list[MigInstance]] = []
        self.dynamic = np.zeros(n, bool)
        self.healthy = np.zeros(n, bool)
        self.used_compute = np.zeros(n, np.int64)
        #: profile name -> per-card profile index (-1 = the card's model has no profile of that name).
        self._names: dict[str, np.ndarray] = {}
        self._changes: dict[int, _Change] = {}
        #: request id -> (card, profile index, start, created by Tessera) for :meth:`release`.
        self._holders: dict[str, tuple[int, int, int, bool]] = {}
        self._node_index: dict[str, np.ndarray] = {}
        for c, card in enumerate(self.cards):
            geometry = mig_geometry(card.model)
            if geometry is not None and not _profile_shapes_match(geometry):
                raise ValueError(f"{card.model}: MIG geometry not supported by the engine")
            self.geometries.append(geometry)
            self.dynamic[c] = card.mode is MigLayoutMode.DYNAMIC
            self.healthy[c] = card.healthy and geometry is not None
            free: list[MigInstance] = []
            for inst in card.instances:
                profile = geometry.profile(inst.profile) if geometry is not None else None
                if geometry is None or profile is None or inst.start not in profile.starts:
                    raise ValueError(
                        f"{card.node}/{card.gpu_index}: {inst.profile} at {inst.start} is not a valid "
                        f"placement on {card.model}"
                    )
                mask = profile.mask(inst.start)
                if int(self.occupied[c]) & mask:
                    raise ValueError(f"{card.node}/{card.gpu_index}: instances overlap")
                self.occupied[c] |= mask
                if inst.in_use:
                    self.used[c] |= mask
                    self.used_compute[c] += profile.compute_slices
                else:
                    free.append(inst)
                    self.free_count[c, geometry.profiles.index(profile)] += 1
            self.free_instances.append(sorted(free, key=lambda i: i.start))
        names = np.array([card.node for card in self.cards])
        for node in set(names.tolist()):
            self._node_index[node] = names == node

    # ------------------------------------------------------------ lookups
    def _profile_indices(self, name: str) -> np.ndarray:
        """Per card, the index of the profile called ``name`` in its model's geometry, -1 where there is none
        (``1g.10gb`` is the one-slice 1g on the 80 GB cards and the two-slice 1g on the 40 GB A100)."""
        if name not in self._names:
            index = np.full(len(self.cards), -1, np.int64)
            for c, geometry in enumerate(self.geometries):
                profile = geometry.profile(name) if geometry is not None else None
                if geometry is not None and profile is not None:
                    index[c] = geometry.profiles.index(profile)
            self._names[name] = index
        return self._names[name]

    def _eligible(self, request: MigRequest, index: np.ndarray) -> np.ndarray:
        ok = (index >= 0) & self.healthy
        if request.nodes:
            allowed = np.zeros(len(self.cards), bool)
            for node in request.nodes:
                if node in self._node_index:
                    allowed |= self._node_index[node]
            ok &= allowed
        return ok

    def _keys(self, k: int, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Score keys of profile index ``k`` on the cards ``ok``: (free instance per card, new instance per card
        and position, new layout per card and position); ``_BIG`` where the candidate is not feasible."""
        qs = _BY_PROFILE[k]
        n = len(self.cards)
        key0 = np.where(ok & (self.free_count[:, k] > 0), _POPCOUNT[_FULL ^ self.used], _BIG)
        occ = self.occupied
        dyn = ok & self.dynamic
        relayout = dyn & (self.used == 0) & (occ != 0)
        key1 = np.full((n, len(qs)), _BIG, np.int64)
        key2 = np.full((n, len(qs)), _BIG, np.int64)
        for j, q in enumerate(qs):
            mask = int(_MASKS[q])
            fits = dyn & ((occ & mask) == 0)
            loss1 = (1000 + _LOSS[occ, q]) * 16 + _POPCOUNT[_FULL ^ (occ | mask)]
            key1[:, j] = np.where(fits, loss1, _BIG)
            loss2 = (2000 + int(_LOSS[0, q])) * 16 + int(_POPCOUNT[_FULL ^ mask])
            key2[:, j] = np.where(relayout, loss2, _BIG)
        return key0, key1, key2

    # ------------------------------------------------------------ one request
    def place(
        self, request: MigRequest, policy: MigPolicy = MigPolicy.PACKING
    ) -> MigPlacement | MigUnplaced:
        """Place one request (filter → score → pick) and update the state; never raises for bad requests."""
        index = self._profile_indices(request.profile)
        if not (index >= 0).any():
            return MigUnplaced(
                request.request_id,
                MigUnplacedReason.UNKNOWN_PROFILE,
                f"no card here offers the MIG profile {request.profile}",
            )
        ok = self._eligible(request, index)
        # (key, card, tier, placement) of the best candidate of each kind, per profile shape present.
        options: list[tuple[int, int, int, int, int]] = []
        for k in sorted({int(x) for x in index[ok]}):
            qs = _BY_PROFILE[k]
            key0, key1, key2 = self._keys(k, ok & (index == k))
            if policy is MigPolicy.FIRST_FIT:
                fits = (key0 < _BIG) | (key1 < _BIG).any(axis=1) | (key2 < _BIG).any(axis=1)
                if not fits.any():
                    continue
                c = int(np.argmax(fits))
                if key0[c] < _BIG:
                    options.append((c, 0, 0, c, -1))
                elif (key1[c] < _BIG).any():
                    options.append((c, 0, 1, c, int(qs[int(np.argmax(key1[c] < _BIG))])))
                else:
                    options.append((c, 0, 2, c, int(qs[int(np.argmax(key2[c] < _BIG))])))
                continue
            best0 = int(np.argmin(key0))
            best1 = int(np.argmin(key1))
            best2 = int(np.argmin(key2))
            width = len(qs)
            options.append((int(key0[best0]), best0, 0, best0, -1))
            options.append(
                (int(key1.flat[best1]), best1 // width, 1, best1 // width, int(qs[best1 % width]))
            )
            options.append(
                (int(key2.flat[best2]), best2 // width, 2, best2 // width, int(qs[best2 % width]))
            )
        if not options:
            return self._no_position(request)
        value, _order, tier, c, q = min(options)
        if value == _BIG:
            return self._no_position(request)
        return self._take(request, int(index[c]), tier, c, q)

    def _no_position(self, request: MigRequest) -> MigUnplaced:
        return MigUnplaced(
            request.request_id,
            MigUnplacedReason.NO_FREE_POSITION,
            f"no card has a free {request.profile} position now",
        )

    def _take(self, request: MigRequest, k: int, tier: int, c: int, q: int) -> MigPlacement:
        card = self.cards[c]
        geometry = self.geometries[c]
        assert geometry is not None
        profile = geometry.profiles[k]
        if tier == 0:
            inst = next(i for i in self.free_instances[c] if i.profile == profile.name)
            self.free_instances[c].remove(inst)
            self.free_count[c, k] -= 1
            self.used[c] |= profile.mask(inst.start)
            self.used_compute[c] += profile.compute_slices
            self._holders[request.request_id] = (c, k, inst.start, False)
            return MigPlacement(
                request.request_id, card.node, card.gpu_index, profile.name, inst.start, False
            )
        start = _PLACEMENTS[q][1]
        mask = profile.mask(start)
        change = self._changes.setdefault(c, _Change())
        if tier == 2:
            assert int(self.used[c]) == 0, "a new layout only on an empty card"
            change.destroy.extend(self.free_instances[c])
            self.free_instances[c] = []
            self.free_count[c, :] = 0
            self.occupied[c] = 0
        assert int(self.occupied[c]) & mask == 0
        change.create.append(MigInstance(profile.name, start, in_use=True))
        self.occupied[c] |= mask
        self.used[c] |= mask
        self.used_compute[c] += profile.compute_slices
        self._holders[request.request_id] = (c, k, start, True)
        return MigPlacement(
            request.request_id, card.node, card.gpu_index, profile.name, start, True
        )

    def release(self, request_id: str) -> bool:
        """The request's work ended: an instance Tessera created on a dynamic card is destroyed (its slices
        are unpartitioned again), an instance that existed before is free again. False if it holds nothing."""
        held = self._holders.pop(request_id, None)
        if held is None:
            return False
        c, k, start, created = held
        geometry = self.geometries[c]
        assert geometry is not None
        profile = geometry.profiles[k]
        mask = profile.mask(start)
        self.used[c] &= ~mask
        self.used_compute[c] -= profile.compute_slices
        if created and self.dynamic[c]:
            self.occupied[c] &= ~mask
        else:
            self.free_instances[c].append(MigInstance(profile.name, start, False))
            self.free_instances[c].sort(key=lambda i: i.start)
            self.free_count[c, k] += 1
        return True

    # ------------------------------------------------------------ read-outs
    def reconfigurations(self) -> tuple[MigReconfiguration, ...]:
        """One PLANNED reconfiguration per card that changed, in card order."""
        out = []
        for c in sorted(self._changes):
            change = self._changes[c]
            card = self.cards[c]
            out.append(
                MigReconfiguration(
                    card.node, card.gpu_index, tuple(change.destroy), tuple(change.create)
                )
            )
        return tuple(out)

    def placeable_cards(self, profile_index: int) -> int:
        """How many healthy dynamic cards could still take an instance of profile index ``profile_index``
        (``5`` = the whole-card ``7g``) in unpartitioned slices."""
        qs = _BY_PROFILE[profile_index]
        free_any = np.zeros(len(self.cards), bool)
        for q in qs:
            free_any |= (self.occupied & int(_MASKS[q])) == 0
        return int((free_any & self.dynamic & self.healthy).sum())

    def used_compute_slices(self) -> int:
        """Compute slices held by instances in use, over all cards (7 per whole card)."""
        return int(self.used_compute.sum())


def layout_errors(model: str, layout: Sequence[tuple[str, int]]) -> list[str]:
    """Why ``layout`` (``(profile, start)`` pairs) is not a valid MIG layout of one ``model`` card: an unknown
    profile, a start the profile may not take, two instances on one memory slice (``[]`` = valid). Used for
    every layout Tessera reads or writes (a dynamic card's stored layout, a generated MIG manager config)."""
    geometry = mig_geometry(model)
    if geometry is None:
        return [f"{model} has no MIG geometry"]
    if len(layout) > MEMORY_SLICES:
        return [f"a card holds at most {MEMORY_SLICES} instances"]
    errors = []
    occupied = 0
    for name, start in layout:
        profile = geometry.profile(name)
        if profile is None:
            errors.append(f"{model} has no MIG profile {name}")
        elif start not in profile.starts:
            errors.append(f"{name} may not start at memory slice {start} on {model}")
        elif occupied & profile.mask(start):
            errors.append(f"{name} at {start} overlaps another instance")
        else:
            occupied |= profile.mask(start)
    return errors


def request_order(requests: Iterable[MigRequest], sizes: dict[str, int]) -> list[MigRequest]:
    """The order a batch is placed in: higher priority first, then larger instances (compute slices), then
    request id, so a plan never depends on input order."""
    return sorted(requests, key=lambda r: (-r.priority, -sizes.get(r.profile, 0), r.request_id))


def plan_mig(
    cards: Sequence[MigCard],
    requests: Sequence[MigRequest],
    *,
    policy: MigPolicy = MigPolicy.PACKING,
) -> MigPlan:
    """Place a batch of MIG requests on ``cards``: placements, the reconfigurations they need, and the rest
    unplaced with a reason."""
    state = MigState(cards)
    sizes: dict[str, int] = {}
    for geometry in state.geometries:
        for p in geometry.profiles if geometry else ():
            sizes[p.name] = max(sizes.get(p.name, 0), p.compute_slices)
    placements: list[MigPlacement] = []
    unplaced: list[MigUnplaced] = []
    for request in request_order(requests, sizes):
        outcome = state.place(request, policy)
        if isinstance(outcome, MigPlacement):
            placements.append(outcome)
        else:
            unplaced.append(outcome)
    assert len(placements) + len(unplaced) == len(requests)
    return MigPlan(tuple(placements), state.reconfigurations(), tuple(unplaced))


__all__ = [
    "RECONFIGURATION_TRANSITIONS",
    "MigCard",
    "MigInstance",
    "MigLayoutMode",
    "MigPlacement",
    "MigPlan",
    "MigPolicy",
    "MigReconfiguration",
    "MigRequest",
    "MigState",
    "MigUnplaced",
    "MigUnplacedReason",
    "ReconfigurationState",
    "advance",
    "layout_errors",
    "plan_mig",
    "request_order",
]
