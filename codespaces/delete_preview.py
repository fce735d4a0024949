"""What deleting a codespace or a template does, said before it is done (its one confirmation page)
and stored with the operator's audit row."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q

from codespaces.choices import ACTIVE_STATES, CodespaceState
from codespaces.models import Codespace, CodespaceTemplate
from portal.operator_log import ActionImpact


def deletes_for_someone_else(actor: Any, codespace: Codespace) -> bool:
    """Whether `actor` deletes another user's codespace (an operator or a team admin): that delete
    needs a reason, shown in the owner's timeline, and is audited in the operators' activity log."""
    if not getattr(actor, "is_authenticated", False):
        return False  # the system (tests, scripts) acts for nobody
    return bool(actor.pk != codespace.owner_id)


def codespace_delete_impact(codespace: Codespace) -> ActionImpact:
    """The sentence the delete confirmation shows: what stops, what is released, what is lost."""
    holds = (
        f" It stops and releases what it holds on {codespace.location}."
        if codespace.location
        else ""
    )
    return ActionImpact(
        summary=(
            f"Codespace {codespace.name} of {codespace.owner.get_username()} and its "
            f"{codespace.home_gib} GiB home volume are deleted for good.{holds} This cannot be undone."
        ),
        done=(
            f"Codespace {codespace.name} of {codespace.owner.get_username()} and its "
            f"{codespace.home_gib} GiB home volume were deleted."
        ),
        workload_ids=(codespace.workload_id,) if codespace.workload_id else (),
        teams=(codespace.tenant.slug,),
        codespaces=1,
    )


def template_retire_impact(template: CodespaceTemplate) -> ActionImpact:
    """What deleting (retiring) a template does: developers can no longer create from it; the
    codespaces made from it (counted, running ones apart) keep working."""
    counts = Codespace.objects.filter(template=template).aggregate(
        kept=Count("pk", filter=~Q(state__in=[CodespaceState.DELETING, CodespaceState.DELETED])),
        running=Count("pk", filter=Q(state__in=ACTIVE_STATES)),
        teams=Count(
            "tenant",
            distinct=True,
            filter=~Q(state__in=[CodespaceState.DELETING, CodespaceState.DELETED]),
        ),
    )
    if not template.active:
        summary = f"Nothing: template {template.name} is already retired."
        done = ""
    else:
        summary = (
            f"Template {template.name} is no longer offered: developers cannot create codespaces from "
            f"it. Its {counts['kept']} codespace(s) of {counts['teams']} team(s) "
            f"({counts['running']} running or queued) keep working. Its settings are kept."
        )
        done = (
            f"Template {template.name} was retired: developers can no longer create codespaces from "
            f"it. Its {counts['kept']} codespace(s) of {counts['teams']} team(s) "
            f"({counts['running']} running or queued) kept working. Its settings were kept."
        )
    return ActionImpact(
        summary=summary,
        done=done,
        codespaces=counts["kept"],
        details={"running": counts["running"], "teams_count": counts["teams"]},
    )
