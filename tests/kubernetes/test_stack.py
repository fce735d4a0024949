"""The test control plane itself: it comes up with RBAC and token authentication on, and stopping
it leaves no process and no file behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kubernetes.stack import KubeStack

pytestmark = pytest.mark.kubernetes


def test_anonymous_and_unknown_tokens_are_refused_and_the_admin_token_works(
    kube_stack: KubeStack,
) -> None:
    assert kube_stack.request("GET", "/api/v1/namespaces", token="not-a-token")[0] == 401
    status, version = kube_stack.request("GET", "/version")
    assert (status, version["gitVersion"]) == (200, "v1.34.4")
    assert kube_stack.request("GET", "/api/v1/namespaces")[0] == 200


def test_stop_ends_every_process_and_removes_its_files(kube_bin: Path) -> None:
    stack = KubeStack(kube_bin).start()
    pids = [p.pid for p in stack.processes.values()]
    assert sorted(stack.processes) == ["etcd", "kube-apiserver", "kwok"]
    workdir = stack.workdir
    stack.stop()
    assert not workdir.exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
