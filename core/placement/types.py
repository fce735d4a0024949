"""Value types of the placement engine: what goes in (nodes, requests, gangs) and what comes out (a plan).

Every type is a frozen, slotted dataclass (or a ``str`` enum), so snapshots and plans can be hashed, compared
and logged. Units: CPU in milli-cores, memory in MiB, GPU compute in milli (1000 = one whole GPU), GPU memory
in MiB.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from core.units import MILLI_PER_GPU

#: Compute milli of one whole GPU (the engine's name for `core.units.MILLI_PER_GPU`, used across the engine,
#: the simulation and the scheduling services; it moves with the engine into ``core`` in the next step).
GPU_MILLI = MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One physical GPU of a node.

    ``index`` is the device index on the node (0..n-1); ``numa_node`` and ``nvlink_group`` are the topology
    domains used by :class:`TopologyPolicy`; an unhealthy GPU is never offered to any request.
    """

    index: int
    model: str
    memory_mib: int
    numa_node: int = 0
    nvlink_group: int = 0
    healthy: bool = True
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node: capacity, its GPUs, labels and whether it is schedulable (``False`` = cordoned).

    ``gpu_model`` is the node's GPU model label; when empty it is taken from the first GPU.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuSpec, ...] = ()
    gpu_model: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    schedulable: bool = True


class TopologyPolicy(str, Enum):
    """Where the GPUs of a multi-GPU request may sit on a node.

    ``NONE``: anywhere. ``PREFERRED``: in one NVLink group (else one NUMA node) when some node allows it,
    otherwise anywhere. ``RESTRICTED``: only nodes where all GPUs fit in one NVLink group or one NUMA node.
    """

    NONE = "none"
    PREFERRED = "preferred"
    RESTRICTED = "restricted"


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """One thing to place.

    ``gpu_count == 0``: CPU-only. ``gpu_count == 1`` and ``gpu_milli < 1000``: a slice of one GPU (compute
    ``gpu_milli`` and ``gpu_memory_mib`` of memory, 0 = no memory constraint). ``gpu_milli == 1000``:
    ``gpu_count`` whole, completely free GPUs on one node (each taken with all its memory).
    """

    request_id: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    gpu_models: tuple[str, ...] = ()
    node_labels: tuple[tuple[str, str], ...] = ()
    topology: TopologyPolicy = TopologyPolicy.NONE
    priority: int = 0

    @property
    def is_cpu_only(self) -> bool:
        """True when the request asks for no GPU at all."""
        return self.gpu_count == 0 or self.gpu_milli == 0

    @property
    def is_whole_gpu(self) -> bool:
        """True when the request asks for whole GPUs (``gpu_milli == 1000``)."""
        return self.gpu_count >= 1 and self.gpu_milli >= GPU_MILLI

    @property
    def total_gpu_milli(self) -> int:
        """GPU compute the request takes in total (``gpu_count * gpu_milli``)."""
        return 0 if self.is_cpu_only else self.gpu_count * self.gpu_milli


@dataclass(frozen=True, slots=True)
class Assignment:
    """One placed request: the node, the GPU indices on it and what is taken on each GPU.

    For whole-GPU assignments ``gpu_milli`` is 1000 and ``gpu_memory_mib`` records the memory of the card(s)
    taken (a whole GPU takes all its memory). CPU-only assignments have ``gpu_indices == ()``.
    """

    request_id: str
    node: str
    gpu_indices: tuple[int, ...]
    gpu_milli: int
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int


class TopologyMode(str, Enum):
    """How strictly a gang's pods must share one topology domain (a rack, a block, an NVLink domain).

    ``REQUIRED``: in one domain of the level (or a tighter one inside it), else the gang waits.
    ``PREFERRED``: the tightest domain that fits, widening level by level, else anywhere.
    """

    REQUIRED = "required"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """One level of a pool's cross-node topology: its name (``rack``) and the node label whose value names
    the node's domain at that level (``network.tessera.io/rack``). A pool lists its levels widest first
    (zone → block → rack → NVLink domain); a domain is nested in its parent (rack ``r1`` of block ``b1``
    and rack ``r1`` of block ``b2`` are two racks)."""

    name: str
    label_key: str


@dataclass(frozen=True, slots=True)
class GangTopology:
    """A gang's co-location request: all its pods in one domain of ``level`` (a :class:`TopologyLevel`
    name), ``REQUIRED`` or ``PREFERRED``."""

    level: str
    mode: TopologyMode = TopologyMode.REQUIRED


@dataclass(frozen=True, slots=True)
class GangSpec:
    """Requests that must be placed together: at least ``min_available`` of them, or none; with
    ``topology``, all of them inside one topology domain (see :mod:`.topology`)."""

    gang_id: str
    request_ids: tuple[str, ...]
    min_available: int
    topology: GangTopology | None = None


class UnplacedReason(str, Enum):
    """Why a request was not placed (the constraint that left no node)."""

    INVALID_REQUEST = "invalid_request"
    CORDONED = "cordoned"
    NODE_LABELS = "node_labels"
    NO_GPU_MODEL = "no_gpu_model"
    INSUFFICIENT_CPU = "insufficient_cpu"
    INSUFFICIENT_MEMORY = "insufficient_memory"
    INSUFFICIENT_GPU = "insufficient_gpu"
    GPU_MEMORY = "gpu_memory"
    TOPOLOGY = "topology"
    RESERVED = "reserved"
    GANG_INCOMPLETE = "gang_incomplete"
    GANG_TOPOLOGY = "gang_topology"

    @property
    def is_capacity(self) -> bool:
        """True when the request fits some node's shape but not what is free now (capacity others hold or
        keep: reclaim can help); False for a constraint no freed capacity changes (labels, model,
        cordon, topology, a malformed request). ``GANG_TOPOLOGY`` (no domain of the required level has room
        for the whole gang) is not: reclaim frees capacity without regard to where it is, so it would stop
        work without making any one domain fit."""
        return self in _CAPACITY_REASONS


_CAPACITY_REASONS = frozenset(
    {
        UnplacedReason.INSUFFICIENT_GPU,
        UnplacedReason.GPU_MEMORY,
        UnplacedReason.INSUFFICIENT_CPU,
        UnplacedReason.INSUFFICIENT_MEMORY,
        UnplacedReason.GANG_INCOMPLETE,
        UnplacedReason.RESERVED,
    }
)


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A request that could not be placed, as data a person can read.

    ``failed_constraints`` lists ``(constraint, nodes it excluded)`` in filter order (each count is taken
    among the nodes the previous filters left); ``largest_fitting_slice`` is the biggest
    ``(gpu_milli, gpu_memory_mib)`` free on one GPU of a node that passes every non-GPU filter, if any;
    ``largest_domain`` (``GANG_TOPOLOGY`` only) is the ``(level, domain, free GPU milli)`` of the domain of
    the required level with the most free GPU capacity (domain ``""`` and 0 when no node has the level).
    """

    request_id: str
    reason: UnplacedReason
    message: str
    failed_constraints: tuple[tuple[str, int], ...] = ()
    largest_fitting_slice: tuple[int, int] | None = None
    largest_domain: tuple[str, str, int] | None = None


@dataclass(frozen=True, slots=True)
class PlacementPlan:
    """The outcome of :func:`plan_placements`: every request is in exactly one of the two tuples."""

    placements: tuple[Assignment, ...]
    unplaced: tuple[Unplaced, ...]


@dataclass(frozen=True, slots=True)
class ReservationPolicy:
    """Share of CPU and memory on GPU nodes that only GPU work may use.

    CPU-only requests may use at most ``(1 - fraction) * capacity`` of a GPU node's CPU (memory); and when a
    node without GPUs can host a CPU-only request, the request goes there rather than to a GPU node.
    """

    gpu_node_cpu_fraction: float = 0.0
    gpu_node_memory_fraction: float = 0.0


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """One pod type of the target workload used by fragmentation-aware policies (FGD §6.1).

    ``gpu_spec`` is the raw ``|``-joined model list ('' = any model); ``freq`` sums to 1 over the list.
    """

    cpu_milli: int
    gpu_milli: int
    gpu_count: int
    gpu_spec: str
    freq: float
