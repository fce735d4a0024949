"""What deleting a quota does, said on its one confirmation page (and the rule the delete applies:
a quota some workload references is not deleted)."""

from __future__ import annotations

from portal.operator_log import ActionImpact
from quotas.models import Quota


def workloads_referencing(quota: Quota) -> int:
    """How many workloads (running, waiting or finished) reference `quota`: while any does, it stays."""
    return quota.workloads.count()


def quota_delete_impact(quota: Quota) -> ActionImpact:
    """The sentence the quota's delete confirmation shows."""
    referencing = workloads_referencing(quota)
    if referencing:
        summary = (
            f"Nothing: {referencing} workload(s) still reference quota {quota.name}, so the delete "
            "will be refused; set its max to 0 to stop new work instead."
        )
    else:
        summary = (
            f"Quota {quota.name} of team {quota.tenant.slug} leaves group {quota.group.name}: the "
            "team can no longer start work there. Its history is kept."
        )
    return ActionImpact(summary=summary, teams=(quota.tenant.slug,))
