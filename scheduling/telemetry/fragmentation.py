"""The fragmentation map of a pool: free compute and memory per node × GPU, how many more slices of a
preset fit and where (the engine's `filters.fit_counts`), and fragmentation (the engine's FGD model:
free GPU milli that the current request mix cannot use).

Per sharing mode (`quotas.sharing`): a `slice` or `timeslice` pool counts slices and whole cards, an
`exclusive` pool whole cards only, and a `mig` pool its MIG profiles: how many more instances of the chosen
profile the MIG engine can still place per node (static layouts' free instances, dynamic cards' free
positions), and as fragmentation the free GPU-equivalents on cards where the pool's largest profile no
longer fits."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from core.placement import (
    Assignment,
    ClusterState,
    FragModel,
    GpuSpec,
    NodeSpec,
    PlacementRequest,
    typical_pods,
)
from core.placement.filters import fit_counts
from core.placement.mig import MigCard, MigInstance, MigRequest, plan_mig
from core.placement.mig_profiles import MEMORY_SLICES
from core.units import (
    MIB_PER_GIB,
    MIG_COMPUTE_SLICES,
    MILLI_PER_GPU,
    mig_compute_slices,
    mig_gpu_equivalent_milli,
    mig_memory_mib,
    milli_to_percent,
)
from portal.errors import InvalidInput
from quotas.models import Quota, QuotaGroup
from quotas.sharing import SharingMode
from scheduling.choices import ACTIVE_STATES, WorkloadState
from scheduling.models import Gpu, Node, PlacementGpu, Workload
from scheduling.services.mig_cards import mig_cards


@dataclass(frozen=True)
class SlicePreset:
    """A request shape to count: compute milli per GPU, memory MiB per GPU, GPUs."""

    key: str
    label: str
    gpu_milli: int
    gpu_memory_mib: int
    gpu_count: int = 1
    mig_profile: str = ""  # a MIG instance of this profile (a `mig` pool)


PRESETS: tuple[SlicePreset, ...] = (
    SlicePreset("quarter", "25% / 20 GiB", 250, 20480),
    SlicePreset("half", "50% / 40 GiB", 500, 40960),
    SlicePreset("eighth", "12.5% / 10 GiB", 125, 10240),
    SlicePreset("whole", "1 whole GPU", MILLI_PER_GPU, 0),
    SlicePreset("two", "2 whole GPUs", MILLI_PER_GPU, 0, 2),
)


def presets_for(group: QuotaGroup | None) -> tuple[SlicePreset, ...]:
    """The shapes the map offers for a pool's sharing mode: its MIG profiles in a `mig` pool, whole cards
    in an `exclusive` one, slices and whole cards otherwise."""
    mode = group.sharing_mode if group is not None else SharingMode.SLICE
    if mode == SharingMode.MIG:
        return tuple(
            SlicePreset(
                f"mig-{profile}",
                f"MIG {profile}",
                mig_gpu_equivalent_milli(profile),
                mig_memory_mib(profile),
                mig_profile=profile,
            )
            for profile in group.sharing.mig_profiles  # type: ignore[union-attr]
        )
    if mode == SharingMode.EXCLUSIVE:
        return tuple(p for p in PRESETS if p.gpu_milli >= MILLI_PER_GPU)
    return PRESETS


def preset(
    key: str | None,
    milli: int | None = None,
    memory_mib: int | None = None,
    *,
    group: QuotaGroup | None = None,
) -> SlicePreset:
    """A named preset of the pool's mode, or a custom slice when `milli` is given (1–1000 milli, memory
    ≥ 0; only where the pool shares by slices)."""
    offered = presets_for(group)
    if milli is not None:
        if group is not None and group.sharing_mode in (SharingMode.MIG, SharingMode.EXCLUSIVE):
            message = f"Pool {group.name} does not share GPUs by slices: choose one of its shapes."
            raise InvalidInput(message, fields={"gpu_percent": [message]})
        if not 1 <= milli <= MILLI_PER_GPU or (memory_mib or 0) < 0:
            raise InvalidInput(
                f"A slice is 1 to {MILLI_PER_GPU} milli of compute (got {milli}) and non-negative memory.",
                fields={"milli": [f"1 to {MILLI_PER_GPU}"]},
            )
        memory = memory_mib or 0
        label = f"{milli_to_percent(milli):g}% / {memory / MIB_PER_GIB:g} GiB"
        return SlicePreset("custom", label, milli, memory)
    for p in offered:
        if p.key == (key or (offered[0].key if offered else "")):
            return p
    keys = ", ".join(p.key for p in offered) or "none (the pool offers no profile)"
    raise InvalidInput(
        f"Unknown preset {str(key)[:40]!r}: choose one of {keys}.",
        fields={"preset": [f"choose one of {keys}"]},
    )


@dataclass
class FragmentationMap:
    """Per node (rows) and GPU index (columns): free milli and free memory (None = no such GPU or
    unhealthy); fit counts of the preset per node; totals and fragmentation in GPU milli."""

    group: QuotaGroup
    preset: SlicePreset
    nodes: list[str] = field(default_factory=list)
    gpu_columns: int = 0
    free_milli: list[list[int | None]] = field(default_factory=list)
    free_memory_mib: list[list[int | None]] = field(default_factory=list)
    memory_mib: list[list[int | None]] = field(default_factory=list)  # each card's whole memory
    fits: dict[str, int] = field(default_factory=dict)
    free_milli_total: int = 0
    fragmented_milli: float = 0.0

    @property
    def fits_total(self) -> int:
        return sum(self.fits.values())

    @property
    def fragmentation_percent(self) -> float | None:
        if not self.free_milli_total:
            return None
        return round(self.fragmented_milli / self.free_milli_total * 100, 2)


def _request(p: SlicePreset, request_id: str = "preset") -> PlacementRequest:
    return PlacementRequest(
        request_id=request_id,
        cpu_milli=0,
        memory_mib=0,
        gpu_count=p.gpu_count,
        gpu_milli=p.gpu_milli,
        gpu_memory_mib=p.gpu_memory_mib,
    )


def fragmentation_map(group: QuotaGroup, chosen: SlicePreset) -> FragmentationMap:
    """Build the pool's engine state from the database (nodes, healthy GPUs, active placements) and
    read the map, the fit counts and FGD fragmentation from it. Reads plain tuples (a pool can hold
    thousands of GPUs and shares)."""
    selector = group.node_selector or {}
    nodes = [
        row
        for row in Node.objects.order_by("name").values_list(
            "pk", "name", "labels", "cpu_milli", "memory_mib", "gpu_model", "healthy", "cordoned"
        )
        if all((row[2] or {}).get(k) == v for k, v in selector.items())
    ]
    node_ids = {row[0] for row in nodes}
    gpus_by_node: dict[int, list[tuple[int, int, str, int, bool, str]]] = defaultdict(list)
    for gpu_id, node_id, index, model, memory, healthy, uuid in (
        Gpu.objects.filter(node_id__in=node_ids)
        .order_by("index")
        .values_list("pk", "node_id", "index", "model", "memory_mib", "healthy", "uuid")
    ):
        gpus_by_node[node_id].append((gpu_id, index, model, memory, healthy, uuid))
    specs = [
        NodeSpec(
            name=name,
            cpu_milli=cpu,
            memory_mib=memory,
            gpus=tuple(
                GpuSpec(index=i, model=m, memory_mib=mem, healthy=ok and healthy, uuid=u)
                for _g, i, m, mem, ok, u in gpus_by_node[pk]
            ),
            gpu_model=model,
            labels=tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items())),
            schedulable=healthy and not cordoned,
        )
        for pk, name, labels, cpu, memory, model, healthy, cordoned in nodes
    ]
    state = ClusterState.from_nodes(specs)
    name_of = {row[0]: row[1] for row in nodes}
    index_of = {g[0]: g[1] for gs in gpus_by_node.values() for g in gs}
    held: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for placement_id, node_id, gpu_id, milli, memory in PlacementGpu.objects.filter(
        placement__released_at__isnull=True, placement__node_id__in=node_ids
    ).values_list("placement_id", "placement__node_id", "gpu_id", "gpu_milli", "gpu_memory_mib"):
        held[placement_id].append((node_id, index_of[gpu_id], milli, memory))
    for placement_id, shares in sorted(held.items()):
        node_name = name_of[shares[0][0]]
        row = state.index[node_name]
        # an unhealthy GPU is already out of the free capacity: nothing to subtract from it
        if not all(state.gpu_ok[row, j] for _n, j, _m, _mem in shares):
            continue
        milli = shares[0][2]
        state.apply(
            Assignment(
                request_id=f"p{placement_id}",
                node=node_name,
                gpu_indices=tuple(sorted(j for _n, j, _m, _mem in shares)),
                gpu_milli=milli,
                gpu_memory_mib=shares[0][3] if milli < MILLI_PER_GPU else 0,
                cpu_milli=0,
                memory_mib=0,
            )
        )
    result = FragmentationMap(group=group, preset=chosen, gpu_columns=state.max_gpus)
    for i, name in enumerate(state.names):
        if not state.gpu_count[i]:
            continue  # CPU-only nodes of the pool have no row on a GPU map
        result.nodes.append(name)
        row_milli: list[int | None] = []
        row_memory: list[int | None] = []
        row_cards: list[int | None] = []
        for j in range(state.max_gpus):
            if j < state.gpu_count[i] and state.gpu_ok[i, j]:
                row_milli.append(int(state.gpu_free[i, j]))
                row_memory.append(int(state.gpu_mem_free[i, j]))
                row_cards.append(int(state.gpu_mem_cap[i, j]))
            else:
                row_milli.append(None)
                row_memory.append(None)
                row_cards.append(None)
        result.free_milli.append(row_milli)
        result.free_memory_mib.append(row_memory)
        result.memory_mib.append(row_cards)
    result.free_milli_total = int(state.gpu_free[state.gpu_ok].sum()) if len(state) else 0
    if chosen.mig_profile:
        result.fits, result.fragmented_milli = _mig_fits(group, result.nodes, chosen.mig_profile)
        return result
    result.fits = fit_counts(state, _request(chosen)) if len(state) else {}
    result.fragmented_milli = round(_fragmented_milli(state, group), 1)
    return result


def _mig_fits(group: QuotaGroup, nodes: list[str], profile: str) -> tuple[dict[str, int], float]:
    """Per node, how many more `profile` instances the MIG engine can place on its healthy cards (one card
    at a time, until it refuses), and the free GPU-equivalent milli of cards on which the pool's largest
    profile no longer fits (capacity only smaller instances can use)."""
    profiles = group.sharing.mig_profiles
    largest = max(profiles, key=lambda p: (mig_compute_slices(p), p)) if profiles else profile
    fits: dict[str, int] = {}
    fragmented = 0.0
    for card in mig_cards(group, nodes):
        if not card.healthy:
            continue
        fits[card.node] = fits.get(card.node, 0) + _more_instances(card, profile)
        if not _more_instances(card, largest, limit=1):
            used = sum(mig_compute_slices(i.profile) for i in card.instances if i.in_use)
            free_slices = MIG_COMPUTE_SLICES - min(used, MIG_COMPUTE_SLICES)
            fragmented += free_slices * MILLI_PER_GPU / MIG_COMPUTE_SLICES
    return fits, round(fragmented, 1)


def _more_instances(card: MigCard, profile: str, *, limit: int = MEMORY_SLICES) -> int:
    """How many more instances of `profile` the MIG engine places on `card`, one after the other."""
    count = 0
    while count < limit:
        plan = plan_mig([card], [MigRequest(f"probe-{count}", profile)])
        if not plan.placements:
            return count
        p = plan.placements[0]
        card = replace(
            card,
            instances=(
                *(i for i in card.instances if (i.profile, i.start) != (p.profile, p.start)),
                MigInstance(p.profile, p.start, in_use=True),
            ),
        )
        count += 1
    return count


def _fragmented_milli(state: ClusterState, group: QuotaGroup) -> float:
    """Σ over schedulable nodes of FGD's F(node) for the typical pods of the pool's active and pending GPU
    requests (the current request mix); 0 without any request."""
    quota_ids = list(Quota.objects.filter(group=group).values_list("pk", flat=True))
    rows = Workload.objects.filter(
        quota_id__in=quota_ids,
        gpu_count__gt=0,
        state__in=[*ACTIVE_STATES, WorkloadState.PENDING],
    ).values_list("gpu_count", "gpu_milli", "gpu_memory_mib")
    requests = [
        PlacementRequest(
            request_id=str(n),
            cpu_milli=0,
            memory_mib=0,
            gpu_count=c,
            gpu_milli=m,
            gpu_memory_mib=mem,
        )
        for n, (c, m, mem) in enumerate(rows)
    ]
    typical = typical_pods(requests)
    if not typical or not len(state):
        return 0.0
    model = FragModel(typical, state.model_index)
    return float(
        sum(model.frag(state.node_key(i)) for i in range(len(state)) if state.schedulable[i])
    )
