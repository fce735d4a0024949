"""What deleting a quota or a quota group does, said on its one confirmation page and stored with its
audit row (and the rules the deletes apply: a quota some workload references is not deleted, nor a
group that still has quotas)."""

from __future__ import annotations

from portal.operator_log import ActionImpact
from quotas.models import Quota, QuotaGroup
from quotas.usage import group_capacity


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
        done = ""
    else:
        summary = (
            f"Quota {quota.name} of team {quota.tenant.slug} leaves group {quota.group.name}: the "
            "team can no longer start work there. Its history is kept."
        )
        done = (
            f"Quota {quota.name} of team {quota.tenant.slug} left group {quota.group.name}: the "
            "team can no longer start work there. Its history was kept."
        )
    return ActionImpact(
        summary=summary,
        done=done,
        teams=(quota.tenant.slug,),
        details={"workloads_referencing": referencing},
    )


def group_delete_impact(group: QuotaGroup) -> ActionImpact:
    """The sentence the group's delete confirmation shows: refused while it has quotas; otherwise the
    nodes and GPUs it selects (by count) stop being scheduled through it."""
    quotas = list(group.quotas.select_related("tenant").order_by("name"))
    if quotas:
        teams = tuple(sorted({q.tenant.slug for q in quotas}))
        return ActionImpact(
            summary=(
                f"Nothing: group {group.name} still has {len(quotas)} quota(s) of "
                f"{len(teams)} team(s), so the delete will be refused; delete its quotas first."
            ),
            teams=teams,
            details={"quotas": len(quotas)},
        )
    capacity = group_capacity(group)
    nodes = capacity.nodes_counted + capacity.nodes_excluded
    gpus = capacity.gpus_healthy + capacity.gpus_unhealthy
    return ActionImpact(
        summary=(
            f"Group {group.name} and its scheduling queue are removed: its {nodes} node(s) with "
            f"{gpus} GPU(s) take no work through it any more. No quota or workload is affected. "
            "Its history is kept."
        ),
        done=(
            f"Group {group.name} and its scheduling queue were removed: its {nodes} node(s) with "
            f"{gpus} GPU(s) take no work through it any more. No quota or workload was affected. "
            "Its history was kept."
        ),
        details={"quotas": 0, "nodes": nodes, "gpus": gpus},
    )
