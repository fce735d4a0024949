"""Seed the chaos database: the demo data (three teams, the simulated 24-node cluster, quotas in both
pools, codespace templates) plus one more member per team, an API token per user, and every fairness
feature of issue 17 switched on through the operators' services (`FAIRNESS`): decayed fair share with a
1-hour half-life, a minimum runtime and a 5 s polite-reclaim countdown in both groups, the harness's
checkpoint hook (TESSERA_CHAOS_HOOK_URL) on four team quotas, a per-person cap on one quota and another
that the operator switches on and off during the run, an equal share of borrowing on one quota, a soft
GPU-hour budget on one quota and a hard one on another (each a little above what the quota used this
week, so both run out within the run's first minutes), and two loans already approved (one from a sibling,
one from the operators) whose windows end while the run is under way. Prints one JSON line:
{"users": {username: {"token", "operator", "probe", "tenants": {slug: {pool: quota id}},
"admin_of": [slug]}}, "budgets": [{"id", "tenant"}], "toggled_cap_quota": id, "loans": [id]}.

Run as `python -m tests.chaos.seed` with DJANGO_SETTINGS_MODULE and DATABASE_URL of the chaos stack.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
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
    """What the chaos run switches on. Seconds are short so that notices run out, and loans end, while
    the run (about three minutes of operations after a setup of about half a minute) is under way;
    budgets are GPU-hours per week, charged from the telemetry's minute samples (one a minute)."""

    half_life_hours: int = 1
    min_runtime_seconds: int = 2
    reclaim_notice_seconds: int = 5
    # group, tenant, GPUs per person; never changed during the run, so the auditor checks it
    user_caps: tuple[tuple[str, str, int], ...] = (("training", "vision", 4),)
    # group, tenant: the operator switches its cap between TOGGLED_CAP and none during the run
    toggled_cap: tuple[str, str] = ("training", "inference")
    # ml-research's borrowers in `interactive` belong to three people (operations.BORROWERS)
    equal_share: tuple[tuple[str, str], ...] = (("interactive", "ml-research"),)
    hooked: tuple[tuple[str, str], ...] = (("training", "ml-research"), ("training", "vision"),
                                           ("interactive", "ml-research"),
                                           ("interactive", "vision"))  # fmt: skip
    # group, tenant, GPU-hours per week beyond what the quota used this week when seeded (the demo
    # seed backfills a month of telemetry), hard. Usage is charged from the telemetry's minute
    # samples, a GPU-minute (1/60 GPU-hour) per GPU held. ml-research holds 30-60 GPUs of `training`
    # once its borrowers run (operations.BORROWERS; 3.4 GPU-hours in the five minutes of a bounded
    # run), so 2 GPU-hours run out two to three minutes in and stop its borrowing (its min still
    # starts); inference holds a few GPUs
    # of `interactive`, so 0.1 GPU-hours run out within the first minutes and stop every new GPU
    # request of that quota (its CPU work and every other quota go on).
    budgets: tuple[tuple[str, str, str, bool], ...] = (("training", "ml-research", "2.00", False),
                                                       ("interactive", "inference", "0.10", True))  # fmt: skip
    # group, borrower, lender ("" = the operators), GPUs, seconds from the seed until the window ends
    loans: tuple[tuple[str, str, str, int, int], ...] = (("training", "inference", "vision", 2, 100),
                                                         ("interactive", "ml-research", "", 2, 150))  # fmt: skip


TOGGLED_CAP = 4
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
    fairness = switch_fairness_on(user_model.objects.get(username="ops"), PROBE_TENANT)
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
    sys.stdout.write(json.dumps({"users": users, **fairness}) + "\n")


def switch_fairness_on(operator: Any, probe_tenant: str) -> dict[str, Any]:
    """Turn on every fairness feature through the services an operator (and, for loan requests, the
    borrowing team's admin) uses, so each is validated and audited as in production. Returns the ids
    the clients need: {"budgets": [{"id", "tenant"}], "toggled_cap_quota": id, "loans": [id]}."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.choices import MembershipRole
    from portal.models import Membership
    from quotas.budgets import create_budget
    from quotas.loans import decide_loan, request_loan
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
        return Quota.objects.select_related("group", "tenant").get(
            group__name=group, tenant__slug=tenant
        )

    hook = os.environ.get(HOOK_URL_VARIABLE, "")
    for team_quota in Quota.objects.exclude(tenant__slug=probe_tenant).order_by("id"):
        key = (team_quota.group.name, team_quota.tenant.slug)
        set_reclaim_settings(
            team_quota,
            checkpoint_webhook_url=hook if hook and key in FAIRNESS.hooked else "",
            equal_borrowing_share=key in FAIRNESS.equal_share,
            actor=operator,
        )
    for pool, tenant, cap in FAIRNESS.user_caps:
        set_user_cap(quota(pool, tenant), cap, actor=operator)
    toggled = quota(*FAIRNESS.toggled_cap)
    set_user_cap(toggled, TOGGLED_CAP, actor=operator)
    budgets = []
    for pool, tenant, beyond, hard in FAIRNESS.budgets:
        budgeted = quota(pool, tenant)
        limit = used_this_week(budgeted) + Decimal(beyond)
        budget = create_budget(
            budgeted, {"limit_gpu_hours": str(limit), "hard": hard}, actor=operator
        )
        budgets.append({"id": int(budget.pk), "tenant": tenant})
    now = timezone.now()
    loans = []
    for pool, borrower_slug, lender_slug, gpus, seconds in FAIRNESS.loans:
        borrower = quota(pool, borrower_slug)
        admin = (
            Membership.objects.filter(tenant=borrower.tenant, role=MembershipRole.TENANT_ADMIN)
            .select_related("user")
            .order_by("user__username")
            .first()
        )
        loan = request_loan(
            borrower=borrower,
            lender=quota(pool, lender_slug) if lender_slug else None,
            gpus=gpus,
            starts_at=now,
            ends_at=now + timedelta(seconds=seconds),
            reason="chaos: a loan that ends mid-run",
            actor=admin.user if admin is not None else operator,
        )
        decide_loan(loan, approve=True, actor=operator, note="chaos: seeded")
        loans.append(int(loan.pk))
    return {"budgets": budgets, "toggled_cap_quota": int(toggled.pk), "loans": loans}


def used_this_week(quota: Any) -> Decimal:
    """The GPU-hours a weekly calendar budget of `quota` would count now (quotas.time_inputs'
    reading), rounded up to the budgets' two decimals."""
    from django.utils import timezone

    from quotas.cluster import cluster_rows
    from quotas.fairness import budget_charge
    from quotas.models import BudgetPeriod, BudgetWindow
    from quotas.time_inputs import period_bounds

    now = timezone.now()
    since, _ = period_bounds(BudgetPeriod.WEEK, BudgetWindow.CALENDAR, now)
    hours = cluster_rows().gpu_usage_hours(int(quota.group_id), since, now)
    used = budget_charge(h for h in hours if h.quota_id == quota.pk and h.hour < now)
    return Decimal(str(used)).quantize(Decimal("0.01"), rounding=ROUND_UP)


if __name__ == "__main__":
    main()
