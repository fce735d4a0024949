"""A real Celery worker (subprocess) against Redis runs tasks and reaches the test database."""

import pytest

from portal.tasks import health_check_task

pytestmark = [pytest.mark.integration]


def test_worker_runs_health_check_against_the_test_database(start_celery_worker, settings):
    start_celery_worker(queues=("default",))
    result = health_check_task.delay().get(timeout=30)
    assert result["status"] == "ok"
    expected_vendor = (
        "postgresql" if "postgresql" in settings.DATABASES["default"]["ENGINE"] else "sqlite"
    )
    assert result["database"] == expected_vendor
