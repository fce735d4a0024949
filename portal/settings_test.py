"""Test settings: the development settings with fast hashing and eager Celery.

Integration tests (marked `integration`) start a real Celery worker process against Redis; they set the
broker themselves (see tests/integration/conftest.py), so nothing here needs a server.
"""

from portal.env import env_bool, env_str
from portal.settings import *  # noqa: F403
from portal.settings import (
    CELERY_BEAT_SCHEDULE,
    CELERY_IMPORTS,
    DATABASES,
    TESSERA_BROKER_VISIBILITY_TIMEOUT,
    VAR_DIR,
)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT = None
CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_BEAT_SCHEDULE = dict(CELERY_BEAT_SCHEDULE)
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "tests"}
}
TESSERA_SIM_START_DELAY_SECONDS = 0.0
# a full collection per test burst would slow the suite; test_heap turns it on
TESSERA_GC_SETTLE_SECONDS = 0.0
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LOGGING = {"version": 1, "disable_existing_loggers": False}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so a real Celery worker process (integration tests) sees the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

if env_bool("TESSERA_TEST_WORKER", False):
    # This process is the Celery worker started by an integration test, or a test sending to it.
    CELERY_TASK_ALWAYS_EAGER = False
    CELERY_BROKER_URL = env_str("TESSERA_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")
    CELERY_RESULT_BACKEND = CELERY_BROKER_URL
    CELERY_BROKER_TRANSPORT = "portal.broker_transport:Transport"  # as settings.py for redis://
    # The production transport options (settings.py), and the tasks only integration tests send.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": TESSERA_BROKER_VISIBILITY_TIMEOUT}
    CELERY_IMPORTS = [*CELERY_IMPORTS, "tests.integration.tasks"]
