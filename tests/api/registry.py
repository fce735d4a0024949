"""How to make an object of a given tenant for every API resource (tests/api/test_tenant_isolation.py).

The isolation matrix enumerates every operation of the generated OpenAPI schema. Each operation's path
starts with /api/v1/<collection>/; this registry says, per collection, who owns its rows and how to create
one for a tenant, so the matrix can prove that another tenant never reads or writes it. A collection missing
here fails the matrix on purpose: register it (with a factory), or say why it is not tenant-owned.

Kinds:
- "tenant": rows belong to a tenant; other tenants get 404 on every detail operation and never see them
  in lists.
- "user": rows belong to a user (tokens); other users get 404 / never see them.
- "self": no rows, the endpoint describes the caller (me).
- "global": shared, non-tenant data every member may read (inventory); `reason` is required.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Model

from portal.models import ApiToken, Tenant
from portal.services import issue_token


@dataclass(frozen=True)
class Owner:
    """The tenant that owns the object, and a member of it who created it."""

    tenant: Tenant
    user: Any


@dataclass(frozen=True)
class Resource:
    kind: str  # "tenant" | "user" | "self" | "global"
    make: Callable[[Owner], Model] | None = None
    # Path parameters (beyond the first, which is `lookup(obj)`) for nested routes.
    path_params: Callable[[Model], dict[str, str]] | None = None
    lookup: Callable[[Model], str] = field(default=lambda obj: str(obj.pk))
    list_key: str = "id"
    # A body for POST on the collection that tries to create a row in `Owner.tenant`; None with a reason
    # when the collection cannot name another tenant (e.g. tokens are always the caller's own).
    create_payload: Callable[[Owner, Model], dict[str, Any]] | None = None
    create_reason: str = ""
    reason: str = ""
    # The model rows counted to prove that a refused write changed nothing ("app_label.Model" or class).
    model: type[Model] | str | None = None

    def model_class(self) -> type[Model] | None:
        if isinstance(self.model, str):
            from django.apps import apps

            return apps.get_model(self.model)
        return self.model


def _token(owner: Owner) -> Model:
    return issue_token(owner.user, name="isolation").token


def _tenant(owner: Owner) -> Model:
    return owner.tenant


def _quota(owner: Owner) -> Model:
    from quotas.models import Quota
    from quotas.tests.factories import QuotaFactory, QuotaGroupFactory

    group = QuotaGroupFactory(name="isolation-pool", node_selector={"pool": "isolation-pool"})
    existing = Quota.objects.filter(group=group, tenant=owner.tenant).first()
    return existing or QuotaFactory(
        group=group, tenant=owner.tenant, name=f"{owner.tenant.slug}-isolation"
    )


def _template(owner: Owner) -> Model:
    """A template open to the owner's tenant only (templates are scoped by `allowed_tenants`)."""
    from codespaces.models import CodespaceTemplate

    template, _ = CodespaceTemplate.objects.get_or_create(
        name=f"tpl-{owner.tenant.slug}",
        defaults={"display_name": "Isolation", "image": "python:3.11"},
    )
    template.allowed_tenants.add(owner.tenant)
    _quota(owner)  # the slice picker needs a quota of the team
    return template


def _codespace(owner: Owner) -> Model:
    from codespaces.choices import GpuMode
    from codespaces.models import Codespace

    template = _template(owner)
    return Codespace.objects.create(
        name=f"cs-{owner.tenant.slug}",
        owner=owner.user,
        tenant=owner.tenant,
        quota=_quota(owner),
        template=template,
        image="python:3.11",
        gpu_mode=GpuMode.NONE,
        cpu_milli=1000,
        memory_mib=2048,
        home_gib=10,
    )


def _placed_workload(owner: Owner) -> Model:
    """A running team-a workload placed on a GPU of node `iso-node` (so inventory views show a share)."""
    from quotas.tests.factories import make_node, make_workload
    from scheduling.models import Node, Placement, PlacementGpu

    node = Node.objects.filter(name="iso-node").first() or make_node(
        "iso-node", pool="isolation-pool", gpu_count=1
    )
    workload = make_workload(
        _quota(owner),
        name=f"{owner.tenant.slug}-secret-work",
        gpu_count=1,
        gpu_milli=250,
        gpu_memory_mib=1024,
    )
    placement = Placement.objects.create(
        workload=workload,
        node=node,
        tenant=owner.tenant,
        cpu_milli=workload.cpu_milli,
        memory_mib=workload.memory_mib,
        gpu_milli_total=250,
    )
    PlacementGpu.objects.create(
        placement=placement, gpu=node.gpus.first(), gpu_milli=250, gpu_memory_mib=1024
    )
    return workload


def _placement(owner: Owner) -> Model:
    return _placed_workload(owner).placements.get()  # type: ignore[attr-defined]


def _node(owner: Owner) -> Model:
    return _placement(owner).node  # type: ignore[attr-defined]


def _gpu(owner: Owner) -> Model:
    return _node(owner).gpus.get()  # type: ignore[attr-defined]


def _mig_reconfiguration(owner: Owner) -> Model:
    from scheduling.models import MigReconfiguration

    return MigReconfiguration.objects.create(gpu=_gpu(owner), new_layout=[["1g.10gb", 0]])


def _job(owner: Owner) -> Model:
    from quotas.tests.factories import make_gang, make_workload

    quota = _quota(owner)
    gang = make_gang(quota, f"{owner.tenant.slug}-secret-job", min_available=2)
    for _ in range(2):
        make_workload(quota, state="pending", gang=gang)
    gang.owner = owner.user
    gang.save(update_fields=["owner"])
    return gang


def _quota_group(owner: Owner) -> Model:
    return _quota(owner).group  # type: ignore[attr-defined]


def _defrag_plan(owner: Owner) -> Model:
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import DefragPlan

    return DefragPlan.objects.create(
        group=_quota_group(owner),
        value="No move helps: nothing can be freed within the limits.",
        expires_at=timezone.now() + timedelta(minutes=15),
    )


def _budget(owner: Owner) -> Model:
    from quotas.models import GpuHourBudget

    return GpuHourBudget.objects.create(quota=_quota(owner), limit_gpu_hours=100)


def _reclaim_notice(owner: Owner) -> Model:
    """A live reclaim notice given to the owner's work (no claimant: team-b is party to nothing)."""
    from datetime import timedelta

    from django.utils import timezone

    from quotas.models import ReclaimNotice

    quota = _quota(owner)
    now = timezone.now()
    return ReclaimNotice.objects.create(
        group=quota.group,
        quota=quota,
        workload_id=7001,
        workload_name=f"{owner.tenant.slug}-secret-work",
        workload_kind="job_pod",
        owner_username=owner.user.username,
        victim_name=f"{owner.tenant.slug}-secret-work",
        reason="a sibling needs its min back",
        noticed_at=now,
        deadline=now + timedelta(minutes=5),
    )


def _loan(owner: Owner) -> Model:
    """A loan to the owner's quota from a third team's quota (so team-b is party to neither side)."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.tests.factories import TenantFactory
    from quotas.models import QuotaLoan
    from quotas.tests.factories import QuotaFactory

    borrower = _quota(owner)
    lender_tenant = TenantFactory(slug="team-c-lender", name="Team C")
    lender = QuotaFactory(group=borrower.group, tenant=lender_tenant, name="team-c-isolation")  # type: ignore[attr-defined]
    now = timezone.now()
    return QuotaLoan.objects.create(
        group=borrower.group,  # type: ignore[attr-defined]
        lender=lender,
        borrower=borrower,
        gpus=1,
        starts_at=now,
        ends_at=now + timedelta(days=1),
    )


REGISTRY: dict[str, Resource] = {
    "me": Resource(kind="self"),
    "tenants": Resource(
        kind="tenant",
        make=_tenant,
        model=Tenant,
        create_reason="read-only collection",
    ),
    "tokens": Resource(
        kind="user",
        make=_token,
        model=ApiToken,
        create_reason="a token is always created for the caller; there is no owner field to forge",
    ),
    "templates": Resource(
        kind="tenant",
        make=_template,
        model="codespaces.CodespaceTemplate",
        create_payload=lambda owner, obj: {
            "name": "forged",
            "display_name": "Forged",
            "image": "python:3.11",
            "allowed_tenant_slugs": [owner.tenant.slug],
        },
    ),
    "nodes": Resource(
        kind="global",
        make=_node,
        model="scheduling.Node",
        reason="the inventory is shared by every tenant; other tenants' slices on a GPU show only "
        "their size (the no-leak check on team-a's slug and workload name still applies)",
    ),
    "gpus": Resource(
        kind="global",
        make=_gpu,
        model="scheduling.Gpu",
        reason="the inventory is shared by every tenant; other tenants' slices show only their size",
    ),
    "mig-reconfigurations": Resource(
        kind="global",
        make=_mig_reconfiguration,
        model="scheduling.MigReconfiguration",
        reason="a card's MIG reconfiguration is inventory, shared by every tenant: it shows the card, "
        "layouts and a count of waiting workloads, never whose they are",
    ),
    "operator-actions": Resource(
        kind="global",
        model="portal.OperatorAction",
        reason="the operators' audit trail: operators read all of it, every tenant's member gets 403 "
        "(it is not tenant-owned; portal/tests/test_operator_log.py checks the personas)",
    ),
    "placements": Resource(kind="tenant", make=_placement, model="scheduling.Placement"),
    "workloads": Resource(kind="tenant", make=_placed_workload, model="scheduling.Workload"),
    "jobs": Resource(
        kind="tenant",
        make=_job,
        model="scheduling.Gang",
        create_payload=lambda owner, obj: {
            "name": "forged",
            "tenant": owner.tenant.slug,
            "quota": obj.quota_id,  # type: ignore[attr-defined]
            "pods": 1,
            "member": {"cpu_milli": 1000, "memory_mib": 1024},
        },
    ),
    "quota-groups": Resource(
        kind="tenant",
        make=_quota_group,
        model="quotas.QuotaGroup",
        reason="a group is visible to the tenants that have a quota in it",
        create_payload=lambda owner, obj: {"name": "forged", "node_selector": {"pool": "x"}},
    ),
    "quotas": Resource(
        kind="tenant",
        make=_quota,
        model="quotas.Quota",
        create_payload=lambda owner, obj: {
            "group": obj.group_id,  # type: ignore[attr-defined]
            "tenant": owner.tenant.slug,
            "name": "forged",
        },
    ),
    "usage/tenants": Resource(
        kind="tenant",
        make=_tenant,
        model="portal.Tenant",
        lookup=lambda obj: obj.slug,  # type: ignore[attr-defined]
    ),
    "usage/quotas": Resource(kind="tenant", make=_quota, model="quotas.Quota"),
    # the month's GPU bill: operators see every team's line, members only their teams' lines
    "usage/bill": Resource(kind="tenant"),
    "usage/bill.csv": Resource(kind="tenant"),
    "usage/pools": Resource(
        kind="global",
        make=_quota_group,
        model="quotas.QuotaGroup",
        lookup=lambda obj: obj.name,  # type: ignore[attr-defined]
        reason="a pool's usage is an aggregate over every tenant in it (cards, utilization, queue); "
        "it names no tenant (the no-leak check on team-a's slug still applies)",
    ),
    "quota-budgets": Resource(
        kind="tenant",
        make=_budget,
        model="quotas.GpuHourBudget",
        create_payload=lambda owner, obj: {
            "quota": obj.quota_id,  # type: ignore[attr-defined]
            "limit_gpu_hours": 5,
        },
    ),
    "reclaim-notices": Resource(
        kind="tenant",
        make=_reclaim_notice,
        model="quotas.ReclaimNotice",
        reason="the reclaim-notices board: the notices of the caller's teams' quotas (all for "
        "operators)",
    ),
    "quota-loans": Resource(
        kind="tenant",
        make=_loan,
        model="quotas.QuotaLoan",
        create_payload=lambda owner, obj: {
            "borrower": obj.borrower_id,  # type: ignore[attr-defined]
            "lender": obj.lender_id,  # type: ignore[attr-defined]
            "gpus": 1,
            "starts_at": "2030-01-01T00:00:00Z",
            "ends_at": "2030-01-02T00:00:00Z",
        },
    ),
    "demand": Resource(
        kind="global",
        reason="the operators' export of recorded demand (every team's requests): members get 403",
    ),
    "what-if": Resource(
        kind="global",
        reason="the operators' capacity planner over every team's recorded demand: members get 403",
    ),
    "defrag": Resource(
        kind="global",
        make=_defrag_plan,
        model="scheduling.DefragPlan",
        reason="the operators' defragmentation plans of a pool (moves of every team's work): members "
        "get 403 on every operation",
    ),
    "codespaces": Resource(
        kind="tenant",
        make=_codespace,
        model="codespaces.Codespace",
        create_payload=lambda owner, obj: {
            "name": "forged",
            "template": obj.template.name,  # type: ignore[attr-defined]
            "tenant": owner.tenant.slug,
            "cpu_milli": 1000,
            "memory_mib": 2048,
        },
    ),
}


def register(collection: str, resource: Resource) -> None:
    """For apps that prefer to register their resources from their own test modules."""
    REGISTRY[collection] = resource
