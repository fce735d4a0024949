"""`manage.py waste_report [--team SLUG] [--csv]`: print a team's weekly waste report (the digest its
admins get, or the CSV), e.g. for the demo team: `manage.py waste_report --team ml-research`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from codespaces.services.waste import digest_text, waste_csv, waste_report
from portal.models import Tenant


class Command(BaseCommand):
    help = "Print a team's GPU waste report (digest text or CSV)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", default="", help="team slug (default: every team)")
        parser.add_argument("--csv", action="store_true", help="print the CSV instead")

    def handle(self, *args: Any, **options: Any) -> None:
        teams = Tenant.objects.order_by("slug")
        if options["team"]:
            teams = teams.filter(slug=options["team"][:63])
            if not teams.exists():
                raise CommandError(f"no team {options['team'][:63]!r}")
        base = settings.TESSERA_PORTAL_URL.rstrip("/")
        for tenant in teams:
            report = waste_report(tenant, timezone.now())
            if options["csv"]:
                self.stdout.write(waste_csv(report), ending="")
            else:
                url = f"{base}/codespaces/waste/?team={tenant.slug}"
                self.stdout.write(digest_text(report, url))
