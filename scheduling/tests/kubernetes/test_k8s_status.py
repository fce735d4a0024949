"""Pod status mapping and the resumable watch (resume, 410 relist, backoff, MISSING)."""

from __future__ import annotations

import pytest
from k8s_builders import NAMESPACE

from scheduling.backends.base import ObservedPhase, StatusReport
from scheduling.backends.kubernetes.fake import FakeCluster
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind
from scheduling.backends.kubernetes.status import Backoff, PodTracker, pod_report


def managed_pod(name: str, workload_id: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/managed-by": "tessera",
                "tessera.io/workload-id": str(workload_id),
            },
        },
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def waiting(reason: str, message: str = "") -> list[dict]:
    state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    return [{"name": "c", "ready": False, "state": state}]


@pytest.mark.parametrize(
    ("_case", "pod", "expected"),
    [
        ("no-pod", None, StatusReport(1, ObservedPhase.MISSING, "no pod in the cluster")),
        (
            "unscheduled",
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/3 nodes are available",
                        }
                    ],
                }
            },
            StatusReport(1, ObservedPhase.PENDING, "Unschedulable: 0/3 nodes are available"),
        ),
        (
            "pulling",
            {
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Pending", "containerStatuses": waiting("ContainerCreating")},
            },
            StatusReport(1, ObservedPhase.PENDING, "ContainerCreating", "n1"),
        ),
        (
            "bad-image",
            {
                "spec": {"nodeName": "n1"},
                "status": {
                    "phase": "Pending",
                    "containerStatuses": waiting("InvalidImageName", 'couldn\'t parse "x::y"'),
                },
            },
            StatusReport(1, ObservedPhase.FAILED, 'InvalidImageName: couldn\'t parse "x::y"', "n1"),
        ),
        (
            "running-ready",
            {
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            },
            StatusReport(1, ObservedPhase.RUNNING, "", "n1"),
        ),
        (
            "crash-looping",
            {
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "containerStatuses": waiting("CrashLoopBackOff")},
            },
            StatusReport(1, ObservedPhase.RUNNING, "CrashLoopBackOff", "n1"),
        ),
        (
            "succeeded",
            {"spec": {"nodeName": "n1"}, "status": {"phase": "Succeeded"}},
            StatusReport(1, ObservedPhase.SUCCEEDED, "", "n1"),
        ),
        (
            "hami-admission",
            {
                "spec": {"nodeName": "n1"},
                "status": {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": "no binding pod found on node n1",
                },
            },
            StatusReport(
                1,
                ObservedPhase.FAILED,
                "UnexpectedAdmissionError: no binding pod found on node n1",
                "n1",
            ),
        ),
        (
            "hami-bind-failed",
            {
                "metadata": {"annotations": {"hami.io/bind-phase": "failed"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Pending"},
            },
            StatusReport(
                1, ObservedPhase.FAILED, "HAMi device allocation failed (bind-phase)", "n1"
            ),
        ),
    ],
)
def test_pod_report_mapping(_case, pod, expected):
    assert pod_report(1, pod) == expected


def test_tracker_lists_first_then_resumes_watch_from_last_resource_version():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, managed_pod("a", 1))
    tracker = PodTracker(cluster, NAMESPACE)

    first = tracker.refresh()
    cluster.set_pod_status(
        NAMESPACE, "a", "Running", conditions=[{"type": "Ready", "status": "True"}]
    )
    cluster.create(Kind.POD, NAMESPACE, managed_pod("b", 2))
    second = tracker.refresh()
    third = tracker.refresh()

    assert [(r.workload_id, r.phase) for r in first] == [(1, ObservedPhase.PENDING)]
    assert [(r.workload_id, r.phase) for r in second] == [
        (1, ObservedPhase.RUNNING),
        (2, ObservedPhase.PENDING),
    ]
    assert third == []
    assert cluster.calls == ["create", "list_pods", "create", "watch_pods", "watch_pods"]
    assert tracker.relists == 1


def test_tracker_ignores_foreign_pods_in_the_namespace():
    cluster = FakeCluster()
    foreign = managed_pod("x", 1)
    foreign["metadata"]["labels"] = {"app": "other"}
    cluster.create(Kind.POD, NAMESPACE, foreign)
    tracker = PodTracker(cluster, NAMESPACE)

    assert tracker.refresh() == []
    assert tracker.pod(1) is None


def test_pod_deleted_outside_tessera_reports_missing():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, managed_pod("a", 1))
    tracker = PodTracker(cluster, NAMESPACE)
    tracker.refresh()

    cluster.delete(Kind.POD, NAMESPACE, "a")  # kubectl delete pod a
    reports = tracker.refresh()

    assert reports == [StatusReport(1, ObservedPhase.MISSING, "no pod in the cluster")]
    assert tracker.pod(1) is None


def test_tracker_relists_after_410_gone_and_reports_what_changed_meanwhile():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, managed_pod("a", 1))
    cluster.create(Kind.POD, NAMESPACE, managed_pod("b", 2))
    tracker = PodTracker(cluster, NAMESPACE)
    tracker.refresh()

    cluster.delete(Kind.POD, NAMESPACE, "a")
    cluster.set_pod_status(NAMESPACE, "b", "Succeeded")
    cluster.compact()  # the events above are gone: the watch must answer 410
    reports = tracker.refresh()

    assert [(r.workload_id, r.phase) for r in reports] == [
        (1, ObservedPhase.MISSING),
        (2, ObservedPhase.SUCCEEDED),
    ]
    assert cluster.calls[-2:] == ["watch_pods", "list_pods"]
    assert tracker.relists == 2


def test_tracker_backs_off_on_transient_errors_then_recovers():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, managed_pod("a", 1))
    sleeps: list[float] = []
    tracker = PodTracker(cluster, NAMESPACE, backoff=Backoff(0.5, 30), sleep=sleeps.append)
    tracker.refresh()
    cluster.fail_next("watch_pods", 503)
    cluster.fail_next("watch_pods", None)  # a timeout
    cluster.set_pod_status(NAMESPACE, "a", "Running")

    reports = tracker.refresh()

    assert sleeps == [0.5, 1.0]
    assert [(r.workload_id, r.phase) for r in reports] == [(1, ObservedPhase.RUNNING)]


def test_tracker_gives_up_after_max_attempts_with_a_transient_error():
    cluster = FakeCluster()
    cluster.fail_next("list_pods", 500, times=3)
    tracker = PodTracker(cluster, NAMESPACE, max_attempts=3, sleep=lambda _: None)

    with pytest.raises(ClusterApiError) as caught:
        tracker.refresh()

    assert caught.value.permanent is False
    assert "gave up after 3 attempts" in caught.value.message


def test_tracker_raises_permanent_errors_at_once():
    cluster = FakeCluster()
    cluster.fail_next("list_pods", 403)
    sleeps: list[float] = []
    tracker = PodTracker(cluster, NAMESPACE, sleep=sleeps.append)

    with pytest.raises(ClusterApiError) as caught:
        tracker.refresh()

    assert (caught.value.status, caught.value.permanent, sleeps) == (403, True, [])


def test_run_delivers_changes_until_stopped():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, managed_pod("a", 1))
    tracker = PodTracker(cluster, NAMESPACE)
    seen: list[StatusReport] = []
    rounds = iter([False, False, True])

    tracker.run(seen.append, lambda: next(rounds))

    assert [(r.workload_id, r.phase) for r in seen] == [(1, ObservedPhase.PENDING)]
    assert cluster.calls == ["create", "list_pods", "watch_pods"]


def test_backoff_is_exponential_and_capped():
    backoff = Backoff(base_seconds=1, cap_seconds=5)

    assert [backoff.delay(n) for n in range(5)] == [1, 2, 4, 5, 5]
