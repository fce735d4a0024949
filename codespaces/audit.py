"""The auditor's `codespace_state` invariant (scheduling.services.audit), checked with the function
pages and the API use: a codespace's stored state, the cache of its phase, equals what
`codespaces.phase.observed_phase` derives from its desired state and its current workload's state,
and an active codespace has a workload. Installed by `CodespacesConfig.ready()`."""

from __future__ import annotations

from django.db.models import Q

from codespaces.choices import ACTIVE_STATES
from codespaces.models import Codespace
from codespaces.phase import observed_phase
from scheduling.services.audit import AuditContext, Finding


def codespace_state_findings(context: AuditContext) -> list[Finding]:
    """The codespaces (and their workloads) unchanged for longer than `grace` whose stored state is
    not their observed phase, or that are active without a workload: id, name, tenant, the stored
    state, the observed phase and the workload's id and state."""
    rows = (
        Codespace.objects.filter(updated_at__lt=context.settled_before)
        .filter(
            Q(workload__isnull=False, workload__updated_at__lt=context.settled_before)
            | Q(workload__isnull=True, state__in=ACTIVE_STATES)
        )
        .values(
            "id", "name", "state", "desired_state", "tenant__slug", "workload_id", "workload__state"
        )
        .order_by("id")
    )
    findings: list[Finding] = []
    for r in rows:
        workload_state = r["workload__state"]
        observed = observed_phase(r["desired_state"], workload_state)
        if workload_state is not None and r["state"] == observed:
            continue
        findings.append(
            {
                "codespace_id": r["id"],
                "codespace": r["name"],
                "tenant": r["tenant__slug"],
                "codespace_state": r["state"],
                "observed_phase": observed,
                "workload_id": r["workload_id"],
                "workload_state": workload_state or "(none)",
            }
        )
    return findings
