from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """Usage samples and rollups (its own app label so it migrates independently of scheduling)."""

    name = "scheduling.telemetry"
    label = "telemetry"
    verbose_name = "Telemetry"

    def ready(self) -> None:
        from scheduling.telemetry import checks  # noqa: F401  (registers the system checks)
