"""Seed the chaos database: the demo data (three teams, the simulated 24-node cluster, quotas in both
pools, codespace templates) plus one more member per team, and an API token per user. Prints one JSON
line: {"users": {username: {"token", "operator", "tenants": {slug: {pool: quota id}}}}}.

Run as `python -m tests.chaos.seed` with DJANGO_SETTINGS_MODULE and DATABASE_URL of the chaos stack.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import django

EXTRA_MEMBERS = [("erin", "vision"), ("frank", "inference"), ("grace", "ml-research")]
PROBE_TENANT = "chaos-probe"
PROBE_USER = "probe"
# The latency probe's quota: a small guaranteed CPU side in `training`, so its tiny jobs are always
# admitted and measure the scheduler, not the competition for capacity.
PROBE_QUOTA = {"cpu_min_cpu_milli": 2000, "cpu_max_cpu_milli": 2000,
               "cpu_min_memory_mib": 2048, "cpu_max_memory_mib": 2048}  # fmt: skip


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
        }
    sys.stdout.write(json.dumps({"users": users}) + "\n")


if __name__ == "__main__":
    main()
