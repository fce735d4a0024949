"""The Django project (settings, urls, Celery app), tenancy, auth and API tokens, the UI shell."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
