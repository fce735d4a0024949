"""The auditor's `codespace_state` invariant (scheduling.services.audit), checked with the function
pages and the API use: a codespace's stored state, the cache of its phase, equals what
`codespaces.phase.observed_phase` derives from its desired state and its current workload's state,
and an active codespace has a workload; and its `codespace_suspended` invariant (a codespace suspended
by polite reclaim is stopped with its home volume kept). Installed by `CodespacesConfig.ready()`."""

from __future__ import annotations

from django.db.models import Q

from codespaces.choices import ACTIVE_STATES, CodespaceState, DesiredState
from codespaces.models import Codespace
from codespaces.phase import observed_phase
from quotas.models import ReclaimNotice, ReclaimNoticeState
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


def suspended_codespace_findings(context: AuditContext) -> list[Finding]:
    """The codespaces suspended by polite reclaim (their workload's ReclaimNotice EXECUTED) that are
    still on that workload, not being deleted, and unchanged for longer than `grace`, whose state is not
    STOPPED (restartable with Start) or whose workload did not mount the codespace's home volume (so
    the home would not be there on restart)."""
    executed = ReclaimNotice.objects.filter(
        state=ReclaimNoticeState.EXECUTED,
        workload_kind="codespace",
        closed_at__lt=context.settled_before,
    ).values_list("workload_id", "pk")
    notices = dict(executed)
    if not notices:
        return []
    codespaces = (
        Codespace.objects.filter(
            workload_id__in=list(notices), updated_at__lt=context.settled_before
        )
        .exclude(desired_state=DesiredState.DELETED)
        .select_related("workload")
        .order_by("id")
    )
    findings: list[Finding] = []
    for codespace in codespaces:
        workload = codespace.workload
        assert workload is not None
        problems = []
        if codespace.state != CodespaceState.STOPPED:
            problems.append(f"{codespace.state}, not stopped")
        if not workload.home_volume or workload.home_volume != codespace.home_volume_name:
            problems.append("its workload did not mount the codespace's home volume")
        if problems:
            findings.append(
                {
                    "codespace_id": codespace.pk,
                    "codespace": codespace.name,
                    "notice_id": notices[workload.pk],
                    "codespace_state": codespace.state,
                    "home_volume": workload.home_volume or "(none)",
                    "expected_home_volume": codespace.home_volume_name,
                    "problem": "; ".join(problems),
                }
            )
    return findings
