"""Polite reclaim through real scheduling cycles (database, simulated backend): a group with a reclaim
notice gives borrowed work a countdown before it stops it, cancels the notice when the pressure goes
away, and with 0 s reclaims at once as before."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
import time_machine
from django.test import override_settings

from quotas.models import DeliveryState, QuotaNotice, ReclaimNotice, ReclaimNoticeState
from scheduling import services
from scheduling.backends.simulated.backend import SimulatedBackend
from scheduling.choices import WorkloadState
from scheduling.models import SimulatedPod, Workload
from scheduling.services.cycle import run_cycle
from scheduling.services.polite_reclaim import deliver_reclaim_notice
from scheduling.tests.factories import make_group, make_quota, small_cluster
from scheduling.tests.factories import submit_whole_gpu_jobs as submit

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
ACTIVE = (WorkloadState.PLACED, WorkloadState.RUNNING)


def fresh(workload: Workload) -> Workload:
    return Workload.objects.get(pk=workload.pk)


def active(workloads: list[Workload]) -> int:
    return sum(fresh(w).state in ACTIVE for w in workloads)


def lab_and_borrower(notice_seconds: int, **team_fields: Any) -> tuple[Any, Any, Any]:
    """4 A100 on one node; `lab` has min 4, `team` min 0 (all it runs is borrowed)."""
    small_cluster(gpu_nodes=1, gpus_per_node=4)
    group = make_group()
    group.reclaim_notice_seconds = notice_seconds
    group.save()
    lab = make_quota(
        group, name="lab", gpu_min_milli=4000, gpu_max_milli=4000,
        gpu_min_gpu_memory_mib=4 * 40960,
    )  # fmt: skip
    team = make_quota(group, name="team", **team_fields)
    return group, lab, team


def test_a_notice_and_its_countdown_come_before_the_borrowed_work_is_stopped() -> None:
    with time_machine.travel(NOW, tick=False):
        group, lab, team = lab_and_borrower(notice_seconds=300)
        borrowed = submit(team, 4, "team")
        run_cycle(group.pk)
        assert active(borrowed) == 4
        (own,) = submit(lab, 1, "lab")
        run_cycle(group.pk)

        notice = ReclaimNotice.objects.get()
        assert (notice.state, notice.quota_id, notice.claimant_quota_id) == (
            ReclaimNoticeState.NOTICED,
            team.pk,
            lab.pk,
        )
        assert notice.deadline == NOW + timedelta(seconds=300)
        assert notice.claimant_workload_ids == [own.pk]
        assert active(borrowed) == 4  # nothing stopped yet
        waiting = fresh(own)
        assert waiting.pending_code == "reclaiming"
        assert "stop at 12:05:00 UTC (in 300 s)" in waiting.pending_reason
        told = QuotaNotice.objects.get(quota=team, kind="reclaim_notice")
        assert "will be stopped at 2026-12-02 12:05:00 UTC" in told.message

    with time_machine.travel(NOW + timedelta(seconds=200), tick=False):
        run_cycle(group.pk)  # the countdown runs: still one notice, nothing stopped
        assert ReclaimNotice.objects.filter(state=ReclaimNoticeState.NOTICED).count() == 1
        assert active(borrowed) == 4
        assert "(in 100 s)" in fresh(own).pending_reason

    with time_machine.travel(NOW + timedelta(seconds=300), tick=False):
        run_cycle(group.pk)  # the deadline: the victim stops, the notice is executed
        notice.refresh_from_db()
        assert notice.state == ReclaimNoticeState.EXECUTED
        assert notice.closed_at == NOW + timedelta(seconds=300)
        victim = fresh(Workload.objects.get(pk=notice.workload_id))
        assert (victim.state, victim.pending_code) == (WorkloadState.PENDING, "reclaimed")
        assert active(borrowed) == 3
        run_cycle(group.pk)
        assert fresh(own).state in ACTIVE


def test_the_notice_is_cancelled_when_the_pressure_goes_away_before_the_deadline() -> None:
    with time_machine.travel(NOW, tick=False):
        group, lab, team = lab_and_borrower(notice_seconds=600)
        borrowed = submit(team, 4, "team")
        run_cycle(group.pk)
        (own,) = submit(lab, 1, "lab")
        run_cycle(group.pk)
        assert ReclaimNotice.objects.get().state == ReclaimNoticeState.NOTICED
    with time_machine.travel(NOW + timedelta(seconds=60), tick=False):
        services.release_workload(own.pk, reason="the lab gave up")
        run_cycle(group.pk)  # nothing waits any more
        notice = ReclaimNotice.objects.get()
        assert notice.state == ReclaimNoticeState.CANCELLED
        assert notice.close_note.startswith("The pressure went away")
        # the task after commit clears the signal the workload was given
        SimulatedPod.objects.create(
            workload_id=notice.workload_id, name="pod", node_name="training-g0",
            running_after=NOW, reclaim_signal={"deadline": "x", "reason": "y"},
        )  # fmt: skip
        assert deliver_reclaim_notice(notice.pk, SimulatedBackend()) == {"signal": "sent"}
        assert SimulatedPod.objects.get(workload_id=notice.workload_id).reclaim_signal is None
    with time_machine.travel(NOW + timedelta(seconds=700), tick=False):
        run_cycle(group.pk)
        assert active(borrowed) == 4  # never stopped


def test_zero_seconds_of_notice_reclaims_at_once_without_a_notice() -> None:
    with time_machine.travel(NOW, tick=False):
        group, lab, team = lab_and_borrower(notice_seconds=0)
        borrowed = submit(team, 4, "team")
        run_cycle(group.pk)
        submit(lab, 1, "lab")
        run_cycle(group.pk)
        assert active(borrowed) == 3
        assert not ReclaimNotice.objects.exists()


class _Hook(BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802  (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def hook_url() -> Iterator[str]:
    _Hook.received = []
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/checkpoint"
    server.shutdown()
    server.server_close()


def noticed_with_hook(url: str) -> ReclaimNotice:
    with time_machine.travel(NOW, tick=False):
        group, lab, team = lab_and_borrower(notice_seconds=300, checkpoint_webhook_url=url)
        submit(team, 4, "team")
        run_cycle(group.pk)
        for w in Workload.objects.filter(quota=team):
            SimulatedPod.objects.create(
                workload_id=w.pk,
                placement_id=w.placements.get().pk,
                name=f"pod-{w.pk}",
                node_name="training-g0",
                running_after=NOW,
            )
        submit(lab, 1, "lab")
        run_cycle(group.pk)
    return ReclaimNotice.objects.get()


@override_settings(TESSERA_CHECKPOINT_HOOK_SECRET="s3cret")
def test_the_workload_is_signalled_and_the_checkpoint_hook_called_signed(hook_url: str) -> None:
    notice = noticed_with_hook(hook_url)
    assert notice.hook_state == DeliveryState.PENDING

    outcome = deliver_reclaim_notice(notice.pk, SimulatedBackend())

    assert outcome == {"signal": DeliveryState.SENT, "hook": DeliveryState.SENT}
    pod = SimulatedPod.objects.get(workload_id=notice.workload_id)
    assert pod.reclaim_signal == {
        "deadline": "2026-12-02T12:05:00+00:00",
        "reason": notice.reason,
    }
    ((headers, body),) = _Hook.received
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Tessera-Signature"] == expected
    sent = json.loads(body)
    assert (sent["event"], sent["workload_id"], sent["quota"], sent["deadline"]) == (
        "reclaim_notice",
        notice.workload_id,
        "team",
        "2026-12-02T12:05:00+00:00",
    )
    notice.refresh_from_db()
    assert (notice.signal_state, notice.hook_state, notice.hook_detail) == (
        DeliveryState.SENT,
        DeliveryState.SENT,
        "HTTP 204",
    )


@override_settings(TESSERA_CHECKPOINT_HOOK_TIMEOUT_SECONDS=0.5)
def test_a_failing_hook_is_recorded_and_the_deadline_stands() -> None:
    notice = noticed_with_hook("http://127.0.0.1:9/down")  # the discard port: refused

    outcome = deliver_reclaim_notice(notice.pk, SimulatedBackend())

    notice.refresh_from_db()
    assert outcome["hook"] == DeliveryState.FAILED
    assert notice.hook_state == DeliveryState.FAILED
    assert notice.hook_detail  # the error, for the quota page
    assert (notice.state, notice.deadline) == (
        ReclaimNoticeState.NOTICED,
        NOW + timedelta(seconds=300),
    )


def test_one_victim_that_fails_to_stop_keeps_its_notice_and_the_others_are_stopped() -> None:
    from quotas.reclaim import Victim
    from quotas.resources import Resources, Side
    from scheduling.services.decide import Reclaim
    from scheduling.services.polite_reclaim import reclaim_politely

    group, lab, team = lab_and_borrower(notice_seconds=60)
    victims = tuple(
        Victim(
            (wid,), None, f"w{wid}", ("job_pod",), team.pk, "team", Side.GPU, 0, Resources(), "r"
        )
        for wid in (1, 2)
    )
    for wid in (1, 2):
        ReclaimNotice.objects.create(
            group=group, quota=team, workload_id=wid, workload_name=f"w{wid}",
            workload_kind="job_pod", victim_name=f"w{wid}", reason="r", noticed_at=NOW,
            deadline=NOW + timedelta(seconds=60),
        )  # fmt: skip
    stopped: list[int] = []

    def stop(_group: Any, claim: Reclaim) -> list[int]:
        (victim,) = claim.victims
        if victim.workload_ids == (1,):
            raise RuntimeError("the backend row is broken")
        stopped.extend(victim.workload_ids)
        return list(victim.workload_ids)

    outcome = reclaim_politely(
        group, Reclaim((99,), "m", victims), {}, now=NOW + timedelta(seconds=60), stop=stop
    )

    assert (outcome.reclaimed, stopped) == ([2], [2])
    states = dict(ReclaimNotice.objects.values_list("workload_id", "state"))
    assert states == {1: ReclaimNoticeState.NOTICED, 2: ReclaimNoticeState.EXECUTED}


def test_a_notice_closed_before_its_delivery_ran_records_that_it_was_never_delivered() -> None:
    # given a notice whose delivery task was late (a busy worker): the deadline passed and the cycle
    # stopped its workload before the signal and the checkpoint hook were attempted
    notice = noticed_with_hook("http://127.0.0.1:9/never-called")
    ReclaimNotice.objects.filter(pk=notice.pk).update(state=ReclaimNoticeState.EXECUTED)

    outcome = deliver_reclaim_notice(notice.pk, SimulatedBackend())

    # then nothing is sent to a stopped workload, and the notice no longer says "pending" for ever:
    # it says that neither the signal nor the hook reached the workload before it was stopped
    notice.refresh_from_db()
    assert outcome == {"signal": DeliveryState.FAILED, "hook": DeliveryState.FAILED}
    assert (notice.signal_state, notice.hook_state) == (DeliveryState.FAILED, DeliveryState.FAILED)
    assert notice.hook_detail == "Not delivered: the notice was executed before its delivery ran."
    assert notice.hook_called_at is None


def test_a_cancelled_notice_never_delivered_has_nothing_pending() -> None:
    notice = noticed_with_hook("http://127.0.0.1:9/never-called")
    ReclaimNotice.objects.filter(pk=notice.pk).update(state=ReclaimNoticeState.CANCELLED)

    deliver_reclaim_notice(notice.pk, SimulatedBackend())

    notice.refresh_from_db()
    # cancelled before anyone was told: nothing was needed any more, nothing is pending
    assert (notice.signal_state, notice.hook_state) == (DeliveryState.NONE, DeliveryState.NONE)
    assert notice.hook_detail == "Not delivered: the notice was cancelled before its delivery ran."
