"""What an operator action on a node or GPU will do, before it is done: the confirmation page, the
API's dry run and the audit row all read it from here, and the action requeues exactly the workloads
counted here (`workloads_on` + `workloads_requeued_with`, the selection `requeue_workloads` makes).
Reads only; takes no lock.
"""

from __future__ import annotations

from collections import Counter

from portal.choices import OperatorActionKind
from portal.operator_log import ActionImpact
from scheduling.choices import ACTIVE_STATES, WorkloadKind
from scheduling.models import Gang, Gpu, Node, Placement, Workload
from scheduling.services.workloads import workloads_requeued_with


def workloads_on(*, node_id: int | None = None, gpu_id: int | None = None) -> list[int]:
    """Ids of the workloads with an active placement on the node (or on the GPU), ascending."""
    qs = Placement.objects.filter(released_at__isnull=True)
    if node_id is not None:
        qs = qs.filter(node_id=node_id)
    if gpu_id is not None:
        qs = qs.filter(gpu_shares__gpu_id=gpu_id)
    return sorted(set(qs.values_list("workload_id", flat=True)))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def requeue_impact(workload_ids: list[int], *, then: str, then_done: str) -> ActionImpact:
    """The impact of requeueing `workload_ids` (with their gangs): how many workloads of how many
    teams, how many codespaces restart, how many job pods wait again. `then` is the sentence about
    the node or GPU itself (`then_done`: the same, said after the fact)."""
    ids = workloads_requeued_with(workload_ids)
    rows = list(
        Workload.objects.filter(pk__in=ids).values_list("kind", "tenant__slug").order_by("pk")
    )
    kinds = Counter(kind for kind, _ in rows)
    teams = tuple(sorted({slug for _, slug in rows}))
    codespaces = kinds[WorkloadKind.CODESPACE]
    jobs = kinds[WorkloadKind.JOB_POD]
    if ids:
        moved = f"{_plural(len(ids), 'workload')} of {_plural(len(teams), 'team')} will be requeued"
        parts = [moved]
        were = "was" if len(ids) == 1 else "were"
        past = [f"{_plural(len(ids), 'workload')} of {_plural(len(teams), 'team')} {were} requeued"]
        if codespaces:
            parts.append(f"{_plural(codespaces, 'codespace')} will restart elsewhere")
            past.append(f"{_plural(codespaces, 'codespace')} restarted elsewhere")
        if jobs:
            parts.append(f"{_plural(jobs, 'job pod')} will wait for capacity again")
            past.append(f"{_plural(jobs, 'job pod')} went back to waiting for capacity")
        summary = "; ".join(parts) + f". {then}"
        done = "; ".join(past) + f". {then_done}"
    else:
        summary = f"No workload runs there: nothing is requeued. {then}"
        done = f"No workload ran there: nothing was requeued. {then_done}"
    return ActionImpact(
        summary=summary,
        workload_ids=tuple(ids),
        teams=teams,
        codespaces=codespaces,
        jobs=jobs,
        done=done,
    )


def node_action_impact(node: Node, action: str) -> ActionImpact:
    """What `action` (cordon, uncordon, drain, node_failure) on `node` will do now."""
    running = workloads_on(node_id=node.pk)
    if action == OperatorActionKind.CORDON:
        keep = _plural(len(running), "workload")
        return ActionImpact(
            summary=f"Node {node.name} takes no new work; the {keep} running there keep running.",
            details={"running": len(running)},
            done=f"Node {node.name} was cordoned; the {keep} running there kept running.",
        )
    if action == OperatorActionKind.UNCORDON:
        return ActionImpact(
            summary=f"Node {node.name} accepts new work again; nothing moves.",
            done=f"Node {node.name} was uncordoned; nothing moved.",
        )
    if action == OperatorActionKind.DRAIN:
        return requeue_impact(
            running,
            then=f"Node {node.name} is cordoned: it takes no new work.",
            then_done=f"Node {node.name} was cordoned.",
        )
    if action == OperatorActionKind.NODE_FAILURE:
        return requeue_impact(
            running,
            then=f"Node {node.name} fails (simulated) until an operator repairs it.",
            then_done=f"Node {node.name} was failed (simulated) until an operator repairs it.",
        )
    raise ValueError(f"not a node action: {action!r}")


def gpu_action_impact(gpu: Gpu, action: str) -> ActionImpact:
    """What `action` (gpu_unhealthy, gpu_healthy, gpu_failure) on `gpu` will do now."""
    label = f"GPU {gpu.index} of node {gpu.node.name}"
    if action == OperatorActionKind.GPU_HEALTHY:
        return ActionImpact(
            summary=f"{label} takes new work again; nothing moves.",
            done=f"{label} was marked healthy; nothing moved.",
        )
    running = workloads_on(gpu_id=gpu.pk)
    if action == OperatorActionKind.GPU_UNHEALTHY:
        return requeue_impact(
            running,
            then=f"{label} takes no new work until marked healthy.",
            then_done=f"{label} was marked unhealthy.",
        )
    if action == OperatorActionKind.GPU_FAILURE:
        return requeue_impact(
            running,
            then=f"{label} fails (simulated) and stays unhealthy until marked healthy.",
            then_done=f"{label} was failed (simulated) until marked healthy.",
        )
    raise ValueError(f"not a GPU action: {action!r}")


def job_cancel_impact(gang: Gang) -> ActionImpact:
    """What cancelling a gang job does (its one confirmation page)."""
    members = list(gang.members.values_list("pk", "state"))
    active = [pk for pk, state in members if state in ACTIVE_STATES]
    return ActionImpact(
        summary=(
            f"Job {gang.name} is cancelled: its {_plural(len(members), 'pod')} stop for good "
            f"({len(active)} placed now release what they hold). This cannot be undone."
        ),
        done=(
            f"Job {gang.name} was cancelled: its {_plural(len(members), 'pod')} stopped for good "
            f"({len(active)} placed released what they held)."
        ),
        workload_ids=tuple(active),
        jobs=len(members),
    )
