"""The units Tessera counts in, the MIG profile grammar, and the one conversion between the exact integers
the database, the API and the engine keep and the units people type and read.

The database, the API and the engine keep exact integers: milli-GPUs and milli-CPUs (1000 = one), MiB.
People type and read GPUs (or % of one GPU), cores and GiB. Every app converts through this module.
Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

# --------------------------------------------------------------------------- the units
#: GPU compute of one whole card, in milli-GPUs.
MILLI_PER_GPU = 1000
#: One CPU core, in milli-CPUs.
MILLI_PER_CORE = 1000
#: One percent of a GPU, in milli-GPUs (100 % = one card).
MILLI_PER_PERCENT = MILLI_PER_GPU // 100
#: MiB in one GiB.
MIB_PER_GIB = 1024
#: ``gpu_milli`` of a whole-card request: it holds every GPU it is given entirely, so it is charged the
#: whole card's memory, not a slice's.
WHOLE_CARD_MILLI = MILLI_PER_GPU
#: Telemetry and billing add up milli-GPU × minutes; one GPU held for an hour is this many of them.
MILLI_MINUTES_PER_GPU_HOUR = MILLI_PER_GPU * 60


def gib_to_mib(gib: int) -> int:
    """Whole GiB as MiB (20 → 20480)."""
    return int(gib) * MIB_PER_GIB


def mib_to_gib(mib: int) -> float:
    """MiB as GiB, fractional when not a whole GiB (20480 → 20.0, 512 → 0.5)."""
    return mib / MIB_PER_GIB


def percent_to_milli(percent: int) -> int:
    """Percent of one GPU as milli-GPU (25 → 250)."""
    return int(percent) * MILLI_PER_PERCENT


def milli_to_percent(milli: int) -> float:
    """Milli-GPU as percent of one GPU (250 → 25.0)."""
    return milli / MILLI_PER_PERCENT


def cores_to_milli(cores: float | Decimal | int | None) -> int:
    """CPU cores (as typed, e.g. 0.5 or Decimal("4.0")) as milli-CPU (0.5 → 500); None → 0."""
    return int((cores or 0) * MILLI_PER_CORE)


def milli_to_cores(milli: int) -> float:
    """Milli-CPU as cores (2500 → 2.5)."""
    return milli / MILLI_PER_CORE


# --------------------------------------------------------------------------- the MIG profile grammar
#: Compute slices of one MIG-capable card (the ``g`` of a profile name counts these; 7 = the whole card).
MIG_COMPUTE_SLICES = 7
#: A MIG profile name as NVIDIA spells it: compute slices 1-7, memory in GB (``1g.10gb``, ``7g.141gb``).
#: Matched whole (``fullmatch``): ``$`` would also accept a name with a trailing newline.
_MIG_PROFILE = re.compile(r"([1-7])g\.([1-9][0-9]{0,2})gb")


class MigProfileError(ValueError):
    """A name that is not a MIG profile name; the message quotes it and says what one looks like."""


@dataclass(frozen=True, slots=True)
class MigProfileName:
    """What a MIG profile name says: ``3g.40gb`` is 3 compute slices (of 7) and 40 GB of memory."""

    compute_slices: int
    memory_gb: int

    @property
    def gpu_equivalent_milli(self) -> int:
        """GPU milli the instance counts as in quotas: its compute slices over 7, rounded down
        (``3g.40gb`` → 428), so the instances of one card never add up to more than one GPU (7 × 1g = 994)."""
        return self.compute_slices * MILLI_PER_GPU // MIG_COMPUTE_SLICES

    @property
    def memory_mib(self) -> int:
        """GPU memory in MiB the name promises (``1g.10gb`` → 10240)."""
        return self.memory_gb * MIB_PER_GIB


def mig_profile_error(name: object) -> str | None:
    """Why ``name`` is not a MIG profile name, for a form or API error; ``None`` when it is one."""
    if isinstance(name, str) and _MIG_PROFILE.fullmatch(name):
        return None
    return (
        f"{str(name)[:40]!r} is not a MIG profile name such as 1g.10gb "
        f"(1 to {MIG_COMPUTE_SLICES} compute slices, g, a dot, then the memory in gb)."
    )


def is_mig_profile(name: object) -> bool:
    """True when ``name`` is a string spelled as a MIG profile (``1g.10gb``); anything else is False."""
    return mig_profile_error(name) is None


def parse_mig_profile(name: object) -> MigProfileName:
    """``"3g.40gb"`` → ``MigProfileName(3, 40)``; anything else raises :class:`MigProfileError`."""
    match = _MIG_PROFILE.fullmatch(name) if isinstance(name, str) else None
    if match is None:
        raise MigProfileError(mig_profile_error(name))
    return MigProfileName(int(match.group(1)), int(match.group(2)))


def mig_compute_slices(profile: str) -> int:
    """The compute slices a MIG profile name asks for (``3g.40gb`` → 3)."""
    return parse_mig_profile(profile).compute_slices


def mig_gpu_equivalent_milli(profile: str) -> int:
    """GPU milli a MIG instance counts as in quotas (``3g.40gb`` → 428): see `MigProfileName`."""
    return parse_mig_profile(profile).gpu_equivalent_milli


def mig_memory_mib(profile: str) -> int:
    """GPU memory in MiB the profile name promises (``1g.10gb`` → 10240)."""
    return parse_mig_profile(profile).memory_mib


# --------------------------------------------------------------------------- people's units
# unit -> (base units per one unit, decimal places a person may type, singular, plural)
UNITS: dict[str, tuple[int, int, str, str]] = {
    "gpus": (MILLI_PER_GPU, 3, "GPU", "GPUs"),
    "cores": (MILLI_PER_CORE, 3, "core", "cores"),
    "gib": (MIB_PER_GIB, 3, "GiB", "GiB"),
    "percent": (MILLI_PER_PERCENT, 1, "%", "%"),  # % of one GPU: 100 % = 1000 milli
}
_DECIMAL = re.compile(r"[0-9]{1,12}(?:[.,][0-9]{0,12})?|[.,][0-9]{1,12}")


class UnitError(ValueError):
    """Text that is not an amount in the unit; the message says why, for a form error."""


def to_base(text: object, unit: str, *, minimum: float = 0, maximum: float = 10**6) -> int:
    """The exact integer (milli or MiB) for an amount a person typed in `unit`: "2.5" GPUs → 2500,
    "12" GiB → 12288, "30" % of a GPU → 300. Refuses (UnitError) text that is not a plain non-negative
    number, has more decimals than the unit allows, or lies outside [minimum, maximum] (in `unit`)."""
    per_unit, places, _singular, plural = UNITS[unit]
    stripped = str(text).strip() if text is not None else ""
    if not _DECIMAL.fullmatch(stripped):
        raise UnitError(f"Enter a number of {plural}, e.g. 2 or 0.5.")
    amount = Decimal(stripped.replace(",", "."))
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise UnitError(f"Use at most {places} decimal place{'s' if places > 1 else ''}.")
    if not Decimal(str(minimum)) <= amount <= Decimal(str(maximum)):
        raise UnitError(
            f"Enter between {format_number(minimum)} and {format_number(maximum)} {plural}."
        )
    return int((amount * per_unit).to_integral_value(rounding=ROUND_HALF_EVEN))


def from_base(value: int | float, unit: str) -> str:
    """The number alone in `unit`, shortest exact form up to the unit's decimals: 2500 → "2.5"."""
    per_unit, places, _singular, _plural = UNITS[unit]
    return format_number(value / per_unit, places=places)


def format_number(value: int | float | Decimal, *, places: int = 2) -> str:
    """12.50 → "12.5", 3.0 → "3", 0.0004 → "0" (at most `places` decimals, no trailing zeros)."""
    text = f"{float(value):.{places}f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def human(value: int | float, unit: str) -> str:
    """A base amount with its unit for people: 2500 milli → "2.5 GPUs", 1000 → "1 GPU", 12288 MiB →
    "12 GiB", 300 milli as percent → "30 %"."""
    _per_unit, _places, singular, plural = UNITS[unit]
    number = from_base(value, unit)
    if unit == "percent":
        return f"{number} %"
    return f"{number} {singular if number == '1' else plural}"


# --------------------------------------------------------------------------- quantities with a suffix
# Kubernetes' notation, which people who run GPU jobs already type: "500m" CPU, "32Gi" / "512Mi" memory
# (binary), "32G" (decimal: 32e9 bytes). The Kubernetes backend reads node capacity with it and the
# `tessera` CLI reads `--cpu` / `--memory`; one parser for both.
_BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)")
MEMORY_EXAMPLES = "e.g. 32Gi, 512Mi, 1.5Gi or 32G"
CPU_EXAMPLES = "e.g. 8, 0.5 or 500m"


def _split_quantity(value: str) -> tuple[Decimal, str]:
    """The number and the suffix of a quantity ("1.5Gi" → (1.5, "Gi")); UnitError if it is none."""
    match = _QUANTITY.fullmatch(value.strip())
    if match is None or match.group(2) not in {**_BINARY_SUFFIXES, **_DECIMAL_SUFFIXES}:
        raise UnitError(f"not a Kubernetes quantity: {value!r}")
    return Decimal(match.group(1)), match.group(2)


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity in base units (bytes, cores): "16Gi" → 17179869184, "500m" → 0.5,
    "80G" → 8e10, "1e3" → 1000. Raises UnitError (a ValueError) for anything else."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    number, suffix = _split_quantity(value)
    return number * _BINARY_SUFFIXES.get(suffix, _DECIMAL_SUFFIXES.get(suffix, Decimal(1)))


def memory_mib(text: str) -> int:
    """Memory a person typed with its unit, as whole MiB (rounded down): "32Gi" → 32768, "1.5Gi" →
    1536, "32G" → 30517. A bare number is refused (bytes? MiB?), as is less than 1 MiB."""
    try:
        _number, suffix = _split_quantity(text)
    except UnitError as exc:
        raise UnitError(f"{text!r} is not an amount of memory; {MEMORY_EXAMPLES}") from exc
    if suffix in ("", "m", "u", "n"):
        raise UnitError(f"{text!r} has no unit of memory; {MEMORY_EXAMPLES}")
    mib = int(parse_quantity(text) / _BINARY_SUFFIXES["Mi"])
    if mib < 1:
        raise UnitError(f"{text!r} is less than 1 MiB; {MEMORY_EXAMPLES}")
    return mib


def cpu_milli(text: str) -> int:
    """CPU a person typed as cores or millicores, as whole milli-CPU (rounded down): "8" → 8000,
    "0.5" → 500, "500m" → 500. Refuses other suffixes and less than 1m."""
    try:
        _number, suffix = _split_quantity(text)
    except UnitError as exc:
        raise UnitError(f"{text!r} is not a number of cores; {CPU_EXAMPLES}") from exc
    if suffix not in ("", "m"):
        raise UnitError(f"{text!r}: give cores or millicores, {CPU_EXAMPLES}")
    milli = int(parse_quantity(text) * MILLI_PER_CORE)
    if milli < 1:
        raise UnitError(f"{text!r} is less than 1m of CPU; {CPU_EXAMPLES}")
    return milli
