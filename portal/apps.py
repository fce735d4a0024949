from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Tenancy and access"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db import models

        from portal.api import schema  # noqa: F401  (registers the OpenAPI auth extension)
        from portal.usernames import validate_username

        # The one username rule (portal.usernames) on the field itself: Django's createsuperuser and
        # any model form validate through it; the admin and SSO also call it with the account at hand.
        user_model = get_user_model()
        field = user_model._meta.get_field(user_model.USERNAME_FIELD)
        if isinstance(field, models.Field) and validate_username not in field.validators:
            field.validators.append(validate_username)
