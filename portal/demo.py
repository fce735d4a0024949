"""Demo tenants and users for `manage.py seed_demo` (idempotent)."""

from __future__ import annotations

from typing import TextIO

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from portal.choices import MembershipRole
from portal.models import Membership, Tenant
from portal.usernames import check_new_username

DEMO_PASSWORD = "tessera-demo"
TENANTS = [
    ("ml-research", "ML Research"),
    ("vision", "Computer Vision"),
    ("inference", "Inference Platform"),
]
USERS = [
    # username, tenant slug, role, is operator
    ("alice", "ml-research", MembershipRole.TENANT_ADMIN, False),
    ("bob", "ml-research", MembershipRole.MEMBER, False),
    ("carol", "vision", MembershipRole.TENANT_ADMIN, False),
    ("dave", "inference", MembershipRole.TENANT_ADMIN, False),
    ("ops", "", MembershipRole.MEMBER, True),
]


def seed(stdout: TextIO) -> None:
    tenants = {}
    for slug, name in TENANTS:
        tenants[slug], _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
    user_model = get_user_model()
    for username, tenant_slug, role, operator in USERS:
        user = user_model.objects.filter(username=username).first()
        if user is None:
            try:
                checked = check_new_username(username)
            except ValidationError as exc:
                message = exc.message_dict["username"][0]
                raise CommandError(f"Demo user {username!r}: {message}") from exc
            user = user_model(
                username=checked,
                email=f"{username}@example.com",
                is_staff=operator,
                is_superuser=operator,
            )
            user.set_password(DEMO_PASSWORD)
            user.save()
        if tenant_slug:
            Membership.objects.get_or_create(
                user=user, tenant=tenants[tenant_slug], defaults={"role": role}
            )
    stdout.write(f"Demo users (password for all: {DEMO_PASSWORD}):\n")
    for username, tenant_slug, role, operator in USERS:
        what = "platform operator" if operator else f"{role.label.lower()} of {tenant_slug}"
        stdout.write(f"  {username:<8} {what}\n")
