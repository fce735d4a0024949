from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Usage samples and rollups (its own app label so it migrates independently of scheduling)."""

    name = "scheduling.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"
