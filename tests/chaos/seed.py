"""Seed the chaos database: the demo data (three teams, the simulated 24-node cluster, quotas in both
pools, codespace templates) plus one more member per team, an API token per user, and every fairness
feature of issue 17 switched on (`FAIRNESS`): decayed fair share, a minimum runtime and a short polite-
reclaim countdown in both groups, the harness's checkpoint hook (TESSERA_CHAOS_HOOK_URL) on every team
quota, a per-user cap, an equal share of borrowing, and GPU-hour budgets (one so small that it is
exhausted within the run's first minutes). Prints one JSON line: {"users": {username: {"token",
"operator", "probe", "tenants": {slug: {pool: quota id}}, "admin_of": [slug]}}, "budgets": [id]}.

Run as `python -m tests.chaos.seed` with DJANGO_SETTINGS_MODULE and DATABASE_URL of the chaos stack.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

import django

EXTRA_MEMBERS = [("erin", "vision"), ("frank", "inference"), ("grace", "ml-research")]
PROBE_TENANT = "chaos-probe"
PROBE_USER = "probe"
# The latency probe's quota: a small guaranteed CPU side in `training`, so its tiny jobs are always
# admitted and measure the scheduler, not the competition for capacity.
PROBE_QUOTA = {"cpu_min_cpu_milli": 2000, "cpu_max_cpu_milli": 2000,
               "cpu_min_memory_mib": 2048, "cpu_max_memory_mib": 2048}  # fmt: skip


@dataclass(frozen=True)
class Fairness:
    """What the chaos run switches on (seconds are short so that notices run out during the run)."""

    half_life_hours: int = 1
    min_runtime_seconds: int = 2
    reclaim_notice_seconds: int = 3
    user_cap: tuple[str, str, int] = (
        "training",
        "ml-research",
        2,
    )  # group, tenant, GPUs per person
    equal_share: tuple[tuple[str, str], ...] = (
        ("training", "ml-research"),
        ("interactive", "vision"),
    )
    # group, tenant, GPU-hours per week: vision's is exhausted after a few GPU-minutes of use
    budgets: tuple[tuple[str, str, str], ...] = (
        ("training", "vision", "0.05"),
        ("interactive", "inference", "500"),
    )


FAIRNESS = Fairness()
HOOK_URL_VARIABLE = "TESSERA_CHAOS_HOOK_URL"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.choices import MembershipRole
    from portal.models import Membership, Tenant
    from portal.services import issue_token
    from quotas.models import Quota, QuotaGroup
    from quotas.services import create_quota

    call_command("seed_demo", stdout=sys.stderr)
    user_model = get_user_model()
    for username, slug in EXTRA_MEMBERS:
        user, _ = user_model.objects.get_or_create(username=username)
        Membership.objects.get_or_create(
            user=user,
            tenant=Tenant.objects.get(slug=slug),
            defaults={"role": MembershipRole.MEMBER},
        )
    probe_tenant, _ = Tenant.objects.get_or_create(
        slug=PROBE_TENANT, defaults={"name": "Chaos latency probe"}
    )
    probe, _ = user_model.objects.get_or_create(username=PROBE_USER)
    Membership.objects.get_or_create(
        user=probe, tenant=probe_tenant, defaults={"role": MembershipRole.TENANT_ADMIN}
    )
    create_quota(
        group=QuotaGroup.objects.get(name="training"),
        tenant=probe_tenant,
        note="chaos latency probe",
        **PROBE_QUOTA,
    )
    budgets = switch_fairness_on(user_model.objects.get(username="ops"), PROBE_TENANT)
    users: dict[str, Any] = {}
    for user in user_model.objects.order_by("username"):
        tenants = {
            m.tenant.slug: dict(
                Quota.objects.filter(tenant=m.tenant)
                .order_by("group__name")
                .values_list("group__name", "pk")
            )
            for m in Membership.objects.filter(user=user).select_related("tenant")
        }
        users[user.username] = {
            "token": issue_token(user, name="chaos").raw,
            "operator": bool(user.is_staff),
            "probe": user.username == PROBE_USER,
            "tenants": tenants,
            "admin_of": sorted(
                Membership.objects.filter(user=user, role=MembershipRole.TENANT_ADMIN).values_list(
                    "tenant__slug", flat=True
                )
            ),
        }
    sys.stdout.write(json.dumps({"users": users, "budgets": budgets}) + "\n")


def switch_fairness_on(operator: Any, probe_tenant: str) -> list[int]:
    """Turn on every fairness feature through the services an operator uses (so each is audited as
    in production); returns the budgets' ids."""
    from quotas.budgets import create_budget
    from quotas.models import Quota, QuotaGroup
    from quotas.reclaim_notices import set_reclaim_notice, set_reclaim_settings
    from quotas.services import update_group
    from quotas.user_caps import set_user_cap

    for group in QuotaGroup.objects.order_by("name"):
        update_group(
            group,
            expected_version=group.version,
            actor=operator,
            note="chaos: fairness over time on",
            fair_share_half_life_hours=FAIRNESS.half_life_hours,
            min_runtime_seconds=FAIRNESS.min_runtime_seconds,
        )
        set_reclaim_notice(group.pk, FAIRNESS.reclaim_notice_seconds, actor=operator)

    def quota(group: str, tenant: str) -> Quota:
        return Quota.objects.get(group__name=group, tenant__slug=tenant)

    hook = os.environ.get(HOOK_URL_VARIABLE, "")
    for team_quota in Quota.objects.exclude(tenant__slug=probe_tenant).order_by("id"):
        wanted = (team_quota.group.name, team_quota.tenant.slug) in FAIRNESS.equal_share
        set_reclaim_settings(
            team_quota,
            checkpoint_webhook_url=hook or None,
            equal_borrowing_share=wanted,
            actor=operator,
        )
    pool, tenant, cap = FAIRNESS.user_cap
    set_user_cap(quota(pool, tenant), cap, actor=operator)
    return [
        int(create_budget(quota(pool, tenant), {"limit_gpu_hours": limit}, actor=operator).pk)
        for pool, tenant, limit in FAIRNESS.budgets
    ]


if __name__ == "__main__":
    main()
