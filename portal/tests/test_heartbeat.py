"""Scheduling that stopped is loud (issue 38): a banner on every page, /healthz 503 and a /metrics gauge
once no scheduling cycle started for TESSERA_SCHEDULING_DOWN_AFTER_SECONDS; a broker that does not
answer shows the banner too, never a 500."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from portal import heartbeat
from portal.models import SweepRun

pytestmark = pytest.mark.django_db


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def watched(settings: Any) -> Iterator[Any]:
    """Settings of a deployment with a real worker (not eager), whose broker is down."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.TESSERA_SCHEDULING_DOWN_AFTER_SECONDS = 30.0
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{closed_port()}/0"
    heartbeat.forget_cached_status()
    yield settings
    heartbeat.forget_cached_status()


def last_cycle(seconds_ago: float) -> None:
    started = timezone.now() - timedelta(seconds=seconds_ago)
    SweepRun.objects.update_or_create(
        name=heartbeat.CYCLE_SWEEP,
        defaults={"started_at": started, "sent_at": started, "task_id": "t"},
    )


def test_a_recent_cycle_is_up_and_shows_no_banner(watched: Any, alice: Any) -> None:
    last_cycle(seconds_ago=4)
    client = Client()
    client.force_login(alice)
    assert 'data-testid="scheduling-down"' not in client.get("/").content.decode()
    health = client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert health.json()["scheduling"]["up"] is True


def test_a_stale_cycle_shows_the_banner_to_everyone_and_healthz_503(
    watched: Any, alice: Any
) -> None:
    # given the last cycle started 45 s ago and a broker that refuses connections
    last_cycle(seconds_ago=45)
    since = timezone.localtime(SweepRun.objects.get().started_at).strftime("%H:%M")
    # then a signed-in page and the anonymous login page both say so, with the time and the cause
    signed_in = Client()
    signed_in.force_login(alice)
    for client, path in ((signed_in, "/"), (Client(), "/accounts/login/")):
        response = client.get(path)
        assert response.status_code == 200
        html = response.content.decode()
        assert 'data-testid="scheduling-down"' in html
        assert f"Scheduling is down since {since}: the broker does not answer." in html
    health = Client().get("/healthz")
    assert health.status_code == 503
    body = health.json()
    assert body["status"] == "down"
    assert body["scheduling"]["cause"] == heartbeat.CAUSE_BROKER_DOWN
    assert 45 <= body["scheduling"]["age_seconds"] < 50


def test_no_cycle_ever_counts_from_the_process_start(watched: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(heartbeat, "PROCESS_STARTED_AT", timezone.now() - timedelta(seconds=31))
    status = heartbeat.read_scheduling_status()
    assert status.up is False
    assert status.last_cycle_at is None
    assert status.cause == heartbeat.CAUSE_BROKER_DOWN


class FakeRedis:
    """The two reads `_cause` makes, over a dict of keys and one set of workers."""

    def __init__(self, workers: set[str], alive: set[str]) -> None:
        self.workers, self.alive = workers, alive

    def smembers(self, key: str) -> set[bytes]:
        assert key == "tessera:workers"
        return {w.encode() for w in self.workers}

    def exists(self, key: str) -> int:
        return int(key.removeprefix("tessera:worker:alive:") in self.alive)


@pytest.mark.parametrize(
    ("_case", "alive", "cause"),
    [
        ("the worker's heartbeat key expired", set(), heartbeat.CAUSE_NO_WORKER),
        ("a worker beats but no cycle starts", {"w1"}, heartbeat.CAUSE_NO_BEAT),
    ],
)
def test_the_cause_tells_a_dead_worker_from_a_dead_beat(
    watched: Any, monkeypatch: Any, _case: str, alive: set[str], cause: str
) -> None:
    monkeypatch.setattr(heartbeat, "_broker_client", lambda url: FakeRedis({"w1"}, alive))
    last_cycle(seconds_ago=60)
    assert heartbeat.read_scheduling_status().cause == cause


def test_eager_tasks_have_no_worker_to_watch(settings: Any) -> None:
    settings.CELERY_TASK_ALWAYS_EAGER = True
    heartbeat.forget_cached_status()
    status = heartbeat.read_scheduling_status()
    assert (status.up, status.watched) == (True, False)
    assert Client().get("/healthz").status_code == 200


def test_the_reading_is_cached_so_pages_add_no_query(
    watched: Any, django_assert_num_queries: Any
) -> None:
    last_cycle(seconds_ago=1)
    heartbeat.scheduling_status()
    with django_assert_num_queries(0):
        assert heartbeat.scheduling_status().up is True


def test_metrics_expose_the_heartbeat_age(watched: Any, operator: Any) -> None:
    last_cycle(seconds_ago=45)
    client = Client()
    client.force_login(operator)
    text = client.get("/metrics").content.decode()
    age = next(
        line
        for line in text.splitlines()
        if line.startswith("tessera_scheduling_heartbeat_age_seconds ")
    )
    assert 45 <= float(age.split()[1]) < 50
    assert "tessera_scheduling_up 0" in text.splitlines()


def test_the_admin_shows_the_banner_too(watched: Any, operator: Any) -> None:
    last_cycle(seconds_ago=45)
    client = Client()
    client.force_login(operator)
    html = client.get("/admin/").content.decode()
    assert 'data-testid="scheduling-down"' in html
    assert "Scheduling is down since" in html
    assert "Site administration" in html  # still Django's admin page around it
