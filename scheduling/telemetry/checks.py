"""System checks of telemetry settings (run by `manage.py check`, runserver, migrate, and by a Celery
worker before it takes work: tagged portal.celery.WORKER_CHECKS_TAG)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register
from django.core.exceptions import ImproperlyConfigured


@register("tessera_settings")
def check_gpu_hour_prices(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """TESSERA_GPU_HOUR_PRICES must parse as MODEL=PRICE pairs."""
    from scheduling.telemetry.series import gpu_hour_prices

    try:
        gpu_hour_prices()
    except ImproperlyConfigured as exc:
        return [Error(str(exc), hint='e.g. "H100=4.0,A100=2.5,default=1.0"', id="telemetry.E001")]
    return []


@register("tessera_settings")
def check_health_rules(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The TESSERA_HEALTH_* knobs must build a valid HealthPolicy (numbers within their bounds)."""
    from scheduling.telemetry.health import health_policy

    try:
        health_policy()
    except ValueError as exc:
        return [Error(f"TESSERA_HEALTH_*: {exc}", id="telemetry.E002")]
    return []
