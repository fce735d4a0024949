"""Polite reclaim of a codespace: its owner is told before, it is suspended at the deadline (stopped
with its home kept, restartable), and the owner is told why, on the page and by e-mail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core import mail
from django.urls import reverse

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.choices import EventKind
from codespaces.models import Codespace
from codespaces.tests.fixtures import quota_with
from quotas.models import ReclaimNotice, ReclaimNoticeState
from scheduling import services as scheduling
from scheduling.models import SimulatedPod, Workload
from scheduling.services import reconcile

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_a_reclaimed_codespace_is_suspended_after_its_notice_with_home_kept_and_owner_told(
    bob: Any,
    team_a: Any,
    team_b: Any,
    gpu_pool: Any,
    template: Any,
    client: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    gpu_pool.reclaim_notice_seconds = 600
    gpu_pool.save()
    borrower = quota_with(gpu_pool, team_a, max_gpus=3, min_gpus=0)  # all it runs is borrowed
    owner_team = quota_with(gpu_pool, team_b, max_gpus=2, min_gpus=2)
    bob.email = "bob@example.com"
    bob.save()
    with time_machine.travel(NOW, tick=False):
        with capture(execute=True):
            codespace = services.create_codespace(
                user=bob, tenant=team_a, quota=borrower, template="pytorch", preset="2x-h100",
                name="bob-dev",
            )  # fmt: skip
        with capture(execute=True):
            reconcile.sync_status()
        codespace.refresh_from_db()
        assert codespace.state == S.RUNNING
        # team-b asks for one of its two guaranteed H100s: only bob's borrowed cards can give it
        with capture(execute=True):
            claimant = scheduling.submit_workload(
                tenant=team_b, quota=owner_team,
                kind="job_pod", name="train", cpu_milli=1000, memory_mib=1024, gpu_count=1,
                gpu_milli=1000, gpu_memory_mib=80 * 1024, gpu_models=["H100"],
            )  # fmt: skip
        notice = ReclaimNotice.objects.get(workload_id=codespace.workload_id)
        assert notice.state == ReclaimNoticeState.NOTICED
        assert notice.deadline == NOW + timedelta(seconds=600)
        codespace.refresh_from_db()
        assert codespace.state == S.RUNNING  # still running during the countdown
        told = codespace.events.get(kind=EventKind.NOTICE)
        assert told.message.startswith(
            "Your codespace will be suspended at 2026-12-02 12:10:00 UTC (in 10 min)"
        )
        assert "the home volume is kept" in told.message
        assert [m.to for m in mail.outbox] == [["bob@example.com"]]
        pod = SimulatedPod.objects.get(workload_id=codespace.workload_id)
        assert pod.reclaim_signal is not None  # signalled through the backend
        assert pod.reclaim_signal["deadline"] == "2026-12-02T12:10:00+00:00"
        client.force_login(bob)
        page = client.get(reverse("codespaces:detail", args=[codespace.pk])).content.decode()
        assert 'data-testid="reclaim-notice"' in page
        assert "will be suspended at 2026-12-02 12:10:00 UTC" in page

    with time_machine.travel(NOW + timedelta(seconds=600), tick=False):
        with capture(execute=True):
            scheduling.run_cycle(gpu_pool.pk)
        with capture(execute=True):
            reconcile.sync_status()
        codespace.refresh_from_db()
        notice.refresh_from_db()
        assert notice.state == ReclaimNoticeState.EXECUTED
        assert codespace.state == S.STOPPED  # suspended: stopped, its home volume kept
        assert codespace.home_volume_name
        stopped = codespace.events.get(kind=EventKind.RECLAIMED)
        assert "the home volume is kept" in stopped.message
        suspended = codespace.events.filter(kind=EventKind.NOTICE).first()
        assert suspended is not None
        assert suspended.message.startswith("Suspended: its borrowed GPU went back to")
        assert len(mail.outbox) == 2
        assert Workload.objects.get(pk=claimant.pk).state in ("placed", "running")
        # the owner can start it again
        with capture(execute=True):
            services.start_codespace(Codespace.objects.get(pk=codespace.pk), actor=bob)
        codespace.refresh_from_db()
        assert codespace.desired_state == "running"
