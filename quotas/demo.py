"""Demo quota groups and quotas for `manage.py seed_demo` (idempotent; runs after scheduling.demo).

Two groups select the simulated cluster's pools (`pool=training`: H100/A100, `pool=interactive`: L40S/T4).
Each demo tenant gets a quota in both, sized as fractions of the pool's capacity (whole GPUs), so the seed
works with any inventory. In `training`, ml-research's max is twice vision's: when both are hungry they
borrow idle capacity 2:1. In `interactive`, inference keeps its idle min (no lending).
"""

from __future__ import annotations

from typing import Any, TextIO

from portal.models import Tenant
from quotas import services
from quotas.models import Quota, QuotaGroup, bound_field
from quotas.resources import PER_UNIT, Resources, Side, human
from quotas.usage import group_capacity

GROUPS = [
    ("training", "H100/A100 nodes for training jobs", {"pool": "training"}),
    ("interactive", "L40S/T4 nodes for codespaces and inference", {"pool": "interactive"}),
]
# group, tenant, (min fraction, max fraction) of the pool, lends its idle min
QUOTAS = [
    ("training", "ml-research", (0.40, 1.00), True),
    ("training", "vision", (0.25, 0.50), True),
    ("training", "inference", (0.10, 0.25), True),
    ("interactive", "ml-research", (0.25, 0.60), True),
    ("interactive", "vision", (0.25, 0.60), True),
    ("interactive", "inference", (0.30, 1.00), False),
]


def _fraction(capacity: Resources, side: Side, share: float) -> dict[str, int]:
    values = {}
    for dimension in side.dimensions:
        amount = int(capacity.get(dimension) * share)
        per_unit = PER_UNIT[dimension]
        values[dimension] = amount // per_unit * per_unit  # whole GPUs, CPUs and GiB
    return values


def seed(stdout: TextIO) -> None:
    for name, description, selector in GROUPS:
        if not QuotaGroup.objects.filter(name=name).exists():
            services.create_group(
                name=name, description=description, node_selector=selector, note="demo seed"
            )
    for group_name, tenant_slug, (low, high), lend in QUOTAS:
        group = QuotaGroup.objects.get(name=group_name)
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if tenant is None or Quota.objects.filter(group=group, tenant=tenant).exists():
            continue
        capacity = group_capacity(group)
        values: dict[str, Any] = {"lend_idle_min": lend}
        for side in (Side.GPU, Side.CPU):
            for bound, share in (("min", low), ("max", high)):
                for dimension, amount in _fraction(capacity.side(side), side, share).items():
                    values[bound_field(side, bound, dimension)] = amount
        services.create_quota(group=group, tenant=tenant, note="demo seed", **values)
    for group in QuotaGroup.objects.order_by("name"):
        capacity = group_capacity(group)
        stdout.write(
            f"Quota group {group.name}: GPU side {human(capacity.gpu)}; "
            f"{group.quotas.count()} quotas\n"
        )
