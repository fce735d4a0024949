from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Tenancy and access"

    def ready(self) -> None:
        from portal.api import schema  # noqa: F401  (registers the OpenAPI auth extension)
