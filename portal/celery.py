"""The Celery application. Tasks are discovered per app (`<app>/tasks.py`).

Also the worker-side wiring every task relies on: database connections checked around each task, and
dead-worker takeover on the Redis broker (portal.worker_recovery)."""

import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

from celery import Celery, Task
from celery.signals import (
    before_task_publish,
    task_postrun,
    task_prerun,
    task_received,
    worker_init,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import connections

from portal.redis_clients import redis_client
from portal.worker_recovery import WorkerRecovery, new_incarnation

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Celery's Django fixup runs every system check (URL confs with every view, admin, templates: about
# 0.8 s of a 2.8 s boot) before a worker takes its first task, so a worker restarted after a crash
# starts later. `manage.py check` and `migrate` run them all; a worker runs only the checks of the
# settings its tasks read (`check_worker_settings`).
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")
WORKER_CHECKS_TAG = "tessera_settings"  # system checks a worker runs before taking work

logger = logging.getLogger(__name__)

SWEEP_HEADER = "tessera_sweep"  # the sweep a beat message runs (its task name and arguments)
SENT_AT_HEADER = "tessera_sent_at"  # when beat sent it (Unix seconds, the sender's clock)


class TesseraTask(Task):  # type: ignore[misc]
    """Every task of the app: a copy of a beat sweep that a later run already covered is skipped
    (portal.periodic `claim_sweep`); a message without beat's stamp (sent by code, called directly,
    eager) always runs."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        if request.called_directly:  # task(...) in code: Celery's own call (pushes a request)
            return super().__call__(*args, **kwargs)
        # run by a worker (or eagerly): the worker already pushed this message's request; calling
        # super().__call__ would push an empty one over it (self.request.id/retries lost in the body)
        sweep = getattr(request, SWEEP_HEADER, None)
        sent = getattr(request, SENT_AT_HEADER, None)
        if sweep and sent is not None and request.id:
            from portal.periodic import claim_sweep  # needs the app registry: not at import time

            sent_at = datetime.fromtimestamp(float(sent), tz=UTC)
            if not claim_sweep(str(sweep)[:200], sent_at=sent_at, task_id=str(request.id)):
                logger.debug("%s: the copy sent at %s is covered by a later run", sweep, sent_at)
                return None
        return self.run(*args, **kwargs)


app = Celery("tessera", task_cls=TesseraTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def close_unusable_connections(**_kwargs: Any) -> None:
    """Before and after every task, as Django does around every request (`close_old_connections`):
    drop connections that had an error or outlived CONN_MAX_AGE, and re-arm the health check
    (CONN_HEALTH_CHECKS), so a session PostgreSQL dropped between two tasks reconnects instead of
    failing the next task. A connection inside a transaction (an eager task run by a caller that
    holds one) belongs to that caller and is left alone."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


@worker_init.connect
def check_worker_settings(**_kwargs: Any) -> None:
    """Refuse to start a worker on settings its tasks cannot use (the checks tagged
    WORKER_CHECKS_TAG), as Celery's full run of the system checks did."""
    from django.core.checks import run_checks
    from django.core.management.base import SystemCheckError

    errors = [m for m in run_checks(tags=[WORKER_CHECKS_TAG]) if m.is_serious()]
    if errors:
        raise SystemCheckError("\n".join(str(e) for e in errors))


# --- beat's sweeps carry their send time --------------------------------------------------------------
@before_task_publish.connect
def stamp_sweep_send_time(headers: dict[str, Any] | None = None, **_kwargs: Any) -> None:
    """A message naming a sweep (every beat entry does: portal.settings) gets its send time, so a
    worker that fell behind runs one copy of each sweep instead of every queued one."""
    if headers is not None and headers.get(SWEEP_HEADER):
        headers[SENT_AT_HEADER] = time.time()


# --- dead-worker takeover (Redis broker only) -------------------------------------------------------
_recovery: list[WorkerRecovery] = []  # this process' bookkeeping, once its consumer is ready


def worker_recovery_enabled() -> bool:
    return str(app.conf.broker_url or "").startswith(("redis://", "rediss://")) and bool(
        settings.TESSERA_WORKER_RECOVERY
    )


@worker_ready.connect
def start_worker_recovery(sender: Any = None, **_kwargs: Any) -> None:
    """The consumer is up: heartbeat, and requeue what dead workers held (portal.worker_recovery)."""
    if not worker_recovery_enabled() or _recovery:
        return
    channel = app.connection_for_write().default_channel  # used by the heartbeat thread only
    recovery = WorkerRecovery(
        client=redis_client(str(app.conf.broker_url)),
        incarnation=new_incarnation(getattr(sender, "hostname", None)),
        heartbeat_seconds=float(settings.TESSERA_WORKER_HEARTBEAT_SECONDS),
        dead_after_seconds=float(settings.TESSERA_WORKER_DEAD_AFTER_SECONDS),
        retention_seconds=float(settings.TESSERA_BROKER_VISIBILITY_TIMEOUT),
    )
    recovery.start(restore=channel.qos.restore_by_tag)
    _recovery.append(recovery)
    logger.info("worker %s heartbeating for dead-worker takeover", recovery.incarnation)


@task_received.connect
def track_received_message(request: Any = None, **_kwargs: Any) -> None:
    """Remember each message this worker holds unacknowledged, so a survivor can requeue it."""
    if not _recovery or request is None:
        return
    try:
        _recovery[0].track(str(request.message.delivery_tag))
    except (
        Exception
    ):  # never lose the message over bookkeeping: Redis restores it after the timeout
        logger.exception("could not record delivery %s", getattr(request, "id", "?"))


@worker_shutdown.connect
def stop_worker_recovery(**_kwargs: Any) -> None:
    """Warm shutdown: our tasks finished and the broker connection gives back what we reserved."""
    while _recovery:
        recovery = _recovery.pop()
        recovery.stop()
        recovery.forget_self()
