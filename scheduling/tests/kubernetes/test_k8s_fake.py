"""The fake cluster enforces the API semantics of spec section 7."""

from __future__ import annotations

import pytest
from k8s_builders import NAMESPACE

from scheduling.backends.kubernetes.fake import FakeCluster, matches_selector, merge_patch
from scheduling.backends.kubernetes.interface import ClusterApiError, Kind, WatchExpired


def pod(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "tessera", **labels}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_create_assigns_increasing_resource_versions_and_refuses_duplicates():
    cluster = FakeCluster()

    first = cluster.create(Kind.POD, NAMESPACE, pod("a"))
    second = cluster.create(Kind.POD, NAMESPACE, pod("b"))
    with pytest.raises(ClusterApiError) as caught:
        cluster.create(Kind.POD, NAMESPACE, pod("a"))

    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])
    assert first["status"]["phase"] == "Pending"
    assert (caught.value.status, caught.value.reason) == (409, "AlreadyExists")


def test_binding_answers_409_when_already_bound_and_404_when_missing():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, pod("a"))

    cluster.bind_pod(NAMESPACE, "a", "node-1")
    with pytest.raises(ClusterApiError) as conflict:
        cluster.bind_pod(NAMESPACE, "a", "node-2")
    with pytest.raises(ClusterApiError) as missing:
        cluster.bind_pod(NAMESPACE, "nope", "node-1")

    bound = cluster.get(Kind.POD, NAMESPACE, "a")
    assert bound is not None
    assert bound["spec"]["nodeName"] == "node-1"
    assert {"type": "PodScheduled", "status": "True"} in bound["status"]["conditions"]
    assert conflict.value.status == 409
    assert missing.value.status == 404


def test_node_cas_patch_answers_409_on_stale_resource_version():
    cluster = FakeCluster()
    node = cluster.add_node("n1", annotations={"keep": "me"})
    rv = node["metadata"]["resourceVersion"]

    patched = cluster.cas_patch_node_annotations("n1", {"hami.io/mutex.lock": "x"}, rv)
    with pytest.raises(ClusterApiError) as caught:
        cluster.cas_patch_node_annotations("n1", {"hami.io/mutex.lock": "y"}, rv)
    cleared = cluster.cas_patch_node_annotations(
        "n1", {"hami.io/mutex.lock": None}, patched["metadata"]["resourceVersion"]
    )

    assert patched["metadata"]["annotations"] == {"keep": "me", "hami.io/mutex.lock": "x"}
    assert caught.value.status == 409
    assert cleared["metadata"]["annotations"] == {"keep": "me"}


def test_merge_patch_with_none_deletes_and_nested_dicts_merge():
    target = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}}

    merge_patch(target, {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": None})

    assert target == {"metadata": {"labels": {"b": "2", "c": "3"}}}


@pytest.mark.parametrize(
    ("_case", "selector", "expected"),
    [
        ("equal", "app=x", True),
        ("double-equal", "app==x", True),
        ("not-equal", "app!=x", False),
        ("exists", "app", True),
        ("absent", "!app", False),
        ("and", "app=x,tier=y", False),
        ("empty", "", True),
    ],
)
def test_label_selectors(_case, selector, expected):
    assert matches_selector({"app": "x"}, selector) is expected


def test_list_filters_by_label_selector_and_node_name():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, pod("a", team="x"))
    cluster.create(Kind.POD, NAMESPACE, pod("b", team="y"))
    cluster.create(Kind.POD, "other", pod("c", team="x"))
    cluster.bind_pod(NAMESPACE, "b", "node-1")

    by_label, rv = cluster.list_pods(NAMESPACE, "team=x")
    by_node, _ = cluster.list_pods(NAMESPACE, "", node_name="node-1")

    assert [p["metadata"]["name"] for p in by_label] == ["a"]
    assert [p["metadata"]["name"] for p in by_node] == ["b"]
    assert rv == "4"


def test_watch_resumes_after_resource_version_and_answers_410_after_compaction():
    cluster = FakeCluster()
    cluster.create(Kind.POD, NAMESPACE, pod("a"))
    _, rv = cluster.list_pods(NAMESPACE, "")
    cluster.set_pod_status(NAMESPACE, "a", "Running")
    cluster.delete(Kind.POD, NAMESPACE, "a")

    events = list(cluster.watch_pods(NAMESPACE, "", rv, 5))
    cluster.compact()

    assert [e.type for e in events] == ["MODIFIED", "DELETED"]
    assert events[0].object["status"]["phase"] == "Running"
    with pytest.raises(WatchExpired):
        list(cluster.watch_pods(NAMESPACE, "", rv, 5))


def test_history_limit_expires_old_watch_positions():
    cluster = FakeCluster(history_limit=2)
    cluster.create(Kind.POD, NAMESPACE, pod("a"))
    for phase in ("Running", "Succeeded", "Failed"):
        cluster.set_pod_status(NAMESPACE, "a", phase)

    with pytest.raises(WatchExpired):
        cluster.watch_pods(NAMESPACE, "", "1", 5)
    assert [e.type for e in cluster.watch_pods(NAMESPACE, "", "3", 5)] == ["MODIFIED"]


def test_delete_reports_whether_the_object_existed():
    cluster = FakeCluster()
    cluster.create(Kind.SERVICE, NAMESPACE, {"metadata": {"name": "s"}})

    assert cluster.delete(Kind.SERVICE, NAMESPACE, "s") is True
    assert cluster.delete(Kind.SERVICE, NAMESPACE, "s") is False
    assert cluster.objects(Kind.SERVICE, NAMESPACE) == []


def test_injected_failures_hit_the_named_operation_once():
    cluster = FakeCluster()
    cluster.fail_next("list_nodes", 503)

    with pytest.raises(ClusterApiError) as caught:
        cluster.list_nodes()

    assert (caught.value.status, caught.value.permanent) == (503, False)
    assert cluster.list_nodes() == []


def test_auto_start_schedules_delegated_pods_on_their_intended_node():
    cluster = FakeCluster(auto_start=True)
    body = pod("a")
    body["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n7"]}
                        ]
                    }
                ]
            }
        }
    }

    created = cluster.create(Kind.POD, NAMESPACE, body)

    assert (created["spec"]["nodeName"], created["status"]["phase"]) == ("n7", "Running")
