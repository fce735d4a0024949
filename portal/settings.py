"""Tessera settings: one module, every value from the environment through typed helpers (portal.env).

Development defaults need no external service: SQLite under var/, the embedded Valkey broker that
`make run` starts (portal.embedded_broker), the simulated cluster. `TESSERA_ENV=production` turns on the
strict settings (secure cookies, HSTS, SSL redirect, required SECRET_KEY and ALLOWED_HOSTS). Every
variable is documented in docs/configuration.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from portal.embedded_broker import embedded_broker_port, embedded_broker_url
from portal.env import (
    dev_secret_key,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_secret,
    env_str,
    refuse_unsafe_production,
)
from portal.sso.config import parse_group_map

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("TESSERA_VAR_DIR", str(BASE_DIR / "var")))

TESSERA_ENV = env_choice("TESSERA_ENV", "development", ("development", "production"))
PRODUCTION = TESSERA_ENV == "production"
DEBUG = env_bool("DEBUG", not PRODUCTION)

_secret = env_secret("SECRET_KEY")
if _secret is None:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) is required when TESSERA_ENV=production"
        )
    _secret = dev_secret_key(VAR_DIR)
SECRET_KEY = _secret

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver", "[::1]"]
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ALLOWED_HOSTS is required when TESSERA_ENV=production")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "portal",
    "quotas",
    "scheduling",
    "scheduling.telemetry",
    "codespaces",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A NUL in the query string is a 400 naming the parameter (PostgreSQL refuses NUL).
    "portal.middleware.RefuseNulInQueryMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # SSO sessions older than TESSERA_SSO_ROLE_MAX_AGE_SECONDS sign in again (portal.sso.roles).
    "portal.sso.roles.SsoRoleMaxAgeMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "portal.middleware.ActiveTenantMiddleware",
    # api: Idempotency-Key on every API POST (after auth so session callers are known).
    "portal.api.idempotency.IdempotencyMiddleware",
    "portal.api.middleware.ApiErrorBodyMiddleware",
    # A 404 raised by a view is the styled page even with DEBUG on (no URL list for refused members).
    "portal.middleware.StyledNotFoundMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context_processors.tenancy",
                "portal.context_processors.scheduling",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------------
VAR_DIR.mkdir(parents=True, exist_ok=True)
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'tessera.sqlite3'}")
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        # A persistent connection is checked before its first use in each request or task, so a
        # session PostgreSQL dropped (restart, failover, idle timeout) reconnects instead of a 500.
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + immediate transactions: the web process and the worker write concurrently in dev.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
    "TESSERA_DB_PREPARED_STATEMENTS", True
):
    # Server-side parameters, and statements run 5 times on a connection become prepared statements:
    # PostgreSQL stops parsing and planning the hot queries on every request (bench/api.py: -15 %
    # server CPU per codespace submit). Off for PgBouncer in transaction mode before 1.21.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"server_side_binding": True, "prepare_threshold": 5}
    )
# A transaction that loses a deadlock or serialization race (40P01/40001, SQLite "database is locked")
# is run again this many times in all, with jittered exponential backoff (portal.transactions).
TESSERA_DB_RETRY_ATTEMPTS = env_int("TESSERA_DB_RETRY_ATTEMPTS", 4, minimum=1)
TESSERA_DB_RETRY_BACKOFF_SECONDS = env_float("TESSERA_DB_RETRY_BACKOFF_SECONDS", 0.05)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# --- Single sign-on (portal.sso, OpenID Connect through mozilla-django-oidc): off unless the
# discovery URL is set. Local accounts keep working either way; the login page offers both.
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "portal.sso.backend.TesseraOidcBackend",
]
TESSERA_OIDC_DISCOVERY_URL = env_str("TESSERA_OIDC_DISCOVERY_URL", "")
TESSERA_OIDC_CLIENT_ID = env_str("TESSERA_OIDC_CLIENT_ID", "")
TESSERA_OIDC_CLIENT_SECRET = env_secret("TESSERA_OIDC_CLIENT_SECRET") or ""
TESSERA_OIDC_SCOPES = env_str("TESSERA_OIDC_SCOPES", "openid email profile")
TESSERA_OIDC_PROVIDER_NAME = env_str("TESSERA_OIDC_PROVIDER_NAME", "single sign-on")[:60]
TESSERA_OIDC_USERNAME_CLAIM = env_str("TESSERA_OIDC_USERNAME_CLAIM", "preferred_username")
TESSERA_OIDC_GROUPS_CLAIM = env_str("TESSERA_OIDC_GROUPS_CLAIM", "groups")
TESSERA_OIDC_OPERATOR_GROUPS = env_list("TESSERA_OIDC_OPERATOR_GROUPS", ["tessera-operators"])
TESSERA_OIDC_TEAM_GROUP_PREFIX = env_str("TESSERA_OIDC_TEAM_GROUP_PREFIX", "team-")
TESSERA_OIDC_GROUP_MAP = env_str("TESSERA_OIDC_GROUP_MAP", "")
parse_group_map(TESSERA_OIDC_GROUP_MAP)  # a map entry that cannot be read stops start-up, named
if TESSERA_OIDC_DISCOVERY_URL and not TESSERA_OIDC_CLIENT_ID:
    raise ImproperlyConfigured("TESSERA_OIDC_CLIENT_ID is required with TESSERA_OIDC_DISCOVERY_URL")
if "openid" not in TESSERA_OIDC_SCOPES.split():
    raise ImproperlyConfigured(
        f"TESSERA_OIDC_SCOPES={TESSERA_OIDC_SCOPES!r}: must include 'openid'"
    )
TESSERA_OIDC_TIMEOUT_SECONDS = env_float("TESSERA_OIDC_TIMEOUT_SECONDS", 10.0)
# Roles from SSO are honoured this long after the provider confirmed them (portal.sso.roles).
TESSERA_SSO_ROLE_MAX_AGE_SECONDS = env_int("TESSERA_SSO_ROLE_MAX_AGE_SECONDS", 8 * 3600, minimum=60)
# The library's own knobs: PKCE on (the provider ignores it if it does not support it), no user
# made by the library itself (portal.sso.accounts does), tokens not kept in the session.
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_STORE_ACCESS_TOKEN = False
OIDC_STORE_ID_TOKEN = False
OIDC_AUTHENTICATION_CALLBACK_URL = "sso-callback"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- Static files: served by whitenoise; plotly.min.js comes from the plotly package (no CDN) -------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "portal.staticfinders.PlotlyFinder",
]

# --- Security ---------------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# --- Production safety and sign-in protection (auth) -----------------------------------------------
# Production refuses to start with DEBUG, a placeholder SECRET_KEY or a wildcard ALLOWED_HOSTS.
if PRODUCTION:
    refuse_unsafe_production(debug=DEBUG, secret_key=SECRET_KEY, allowed_hosts=ALLOWED_HOSTS)
# X-Forwarded-Proto decides request.is_secure() only behind a proxy that sets it (else a client could).
if env_bool("TESSERA_TRUST_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Sign-in throttling (portal.login_throttle): failures per (username, address), per address and per
# username in a window.
TESSERA_LOGIN_MAX_FAILURES = env_int("TESSERA_LOGIN_MAX_FAILURES", 5, minimum=1)
TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS = env_int(
    "TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1
)
TESSERA_LOGIN_FAILURE_WINDOW_SECONDS = env_int(
    "TESSERA_LOGIN_FAILURE_WINDOW_SECONDS", 900, minimum=1
)
TESSERA_LOGIN_LOCKOUT_SECONDS = env_int("TESSERA_LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
TESSERA_LOGIN_ACCOUNT_MAX_DELAY_SECONDS = env_int(
    "TESSERA_LOGIN_ACCOUNT_MAX_DELAY_SECONDS", 60, minimum=1
)
# Personal API tokens (portal.services.issue_token): the expiry a new token gets when none is given,
# and the longest one a non-operator may ask for (operators may go past it, or ask for none).
TESSERA_TOKEN_DEFAULT_DAYS = env_int("TESSERA_TOKEN_DEFAULT_DAYS", 90, minimum=1)
TESSERA_TOKEN_MAX_DAYS = env_int("TESSERA_TOKEN_MAX_DAYS", 365, minimum=1)
if TESSERA_TOKEN_DEFAULT_DAYS > TESSERA_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(
        f"TESSERA_TOKEN_DEFAULT_DAYS={TESSERA_TOKEN_DEFAULT_DAYS} is longer than "
        f"TESSERA_TOKEN_MAX_DAYS={TESSERA_TOKEN_MAX_DAYS}: the default must be within the maximum"
    )
# Proxies in front of the portal that append to X-Forwarded-For (0: the client is REMOTE_ADDR).
TESSERA_TRUSTED_PROXY_COUNT = env_int("TESSERA_TRUSTED_PROXY_COUNT", 0, minimum=0)

# --- REST API ---------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.URLPathVersioning",
    "ALLOWED_VERSIONS": ["v1"],
    "DEFAULT_VERSION": "v1",
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.LimitCursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    # api: JSON with lone surrogates is a 400, not a 500 at the first database write.
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.StrictJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # api: ?<field>= filters declared per view (filter_fields), ?search=, ?ordering=; see docs/api.md.
    "DEFAULT_FILTER_BACKENDS": [
        "portal.api.filters.FieldFilterBackend",
        "portal.api.filters.SearchFilter",
        "rest_framework.filters.OrderingFilter",
    ],
    # api: per-token and per-tenant limits, atomic counters (portal.api.ratelimit).
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.ratelimit.TokenTenantRateThrottle"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Tessera API",
    "DESCRIPTION": "GPU platform: elastic quotas, GPU-slice codespaces, gang jobs, placement and usage.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v[0-9]",
    # codespaces: one name for the codespace state enum (state, from_state, to_state).
    "ENUM_NAME_OVERRIDES": {"CodespaceStateEnum": "codespaces.choices.CodespaceState"},
    # api: document the one error body on every operation (400/401/403/404/409/412/422/428/429).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "portal.api.schema.add_error_responses",
    ],
}
TESSERA_API_RATE_PER_TOKEN = env_int("TESSERA_API_RATE_PER_TOKEN", 600, minimum=1)
# A request body larger than this is refused (413 in the API) before it is parsed: the largest job
# within the per-field bounds is far below 1 MiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("TESSERA_MAX_REQUEST_BODY_BYTES", 1024 * 1024, minimum=1024)
TESSERA_API_RATE_PER_TENANT = env_int("TESSERA_API_RATE_PER_TENANT", 3000, minimum=1)
TESSERA_API_RATE_WINDOW_SECONDS = env_int("TESSERA_API_RATE_WINDOW_SECONDS", 60, minimum=1)
TESSERA_IDEMPOTENCY_TTL_HOURS = env_int("TESSERA_IDEMPOTENCY_TTL_HOURS", 24, minimum=1)
# --- Cache (rate limits, per-worker snapshots' version checks) --------------------------------------
REDIS_URL = env_str("REDIS_URL", "")
# api: Redis for rate counters; by default the cache's Redis when there is one, else the database
# (whose counter rows an idempotent POST holds until it commits: fine for one developer, not for a team).
TESSERA_API_RATE_REDIS_URL = env_str("TESSERA_API_RATE_REDIS_URL", REDIS_URL)
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "tessera"}
    )
}

# --- Celery -----------------------------------------------------------------------------------------
# The embedded default: the Valkey server `make run` starts on 127.0.0.1 (portal.embedded_broker).
TESSERA_EMBEDDED_BROKER_PORT = embedded_broker_port()
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", embedded_broker_url(TESSERA_EMBEDDED_BROKER_PORT))
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 240, minimum=1)
# Redis hands out a message nobody acked again only after this long, so it must outlast the longest
# task and the longest retry countdown (60 s) or a slow task runs twice at once. A worker that died
# is noticed far sooner by its missing heartbeat (portal.worker_recovery, docs/scheduling.md).
TESSERA_BROKER_VISIBILITY_TIMEOUT = env_int(
    "TESSERA_BROKER_VISIBILITY_TIMEOUT", CELERY_TASK_TIME_LIMIT + 120, minimum=1
)
if TESSERA_BROKER_VISIBILITY_TIMEOUT <= CELERY_TASK_TIME_LIMIT + 60:
    raise ImproperlyConfigured(
        f"TESSERA_BROKER_VISIBILITY_TIMEOUT={TESSERA_BROKER_VISIBILITY_TIMEOUT}: must be more than "
        f"CELERY_TASK_TIME_LIMIT ({CELERY_TASK_TIME_LIMIT}) + 60 s of retry countdown"
    )
TESSERA_WORKER_RECOVERY = env_bool("TESSERA_WORKER_RECOVERY", True)
TESSERA_WORKER_HEARTBEAT_SECONDS = env_float("TESSERA_WORKER_HEARTBEAT_SECONDS", 1.0)
TESSERA_WORKER_DEAD_AFTER_SECONDS = env_float("TESSERA_WORKER_DEAD_AFTER_SECONDS", 3.0)
if not 0 < TESSERA_WORKER_HEARTBEAT_SECONDS * 2 <= TESSERA_WORKER_DEAD_AFTER_SECONDS <= 60:
    raise ImproperlyConfigured(
        f"TESSERA_WORKER_DEAD_AFTER_SECONDS={TESSERA_WORKER_DEAD_AFTER_SECONDS}: must be at least "
        f"twice TESSERA_WORKER_HEARTBEAT_SECONDS ({TESSERA_WORKER_HEARTBEAT_SECONDS}), at most 60"
    )
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": TESSERA_BROKER_VISIBILITY_TIMEOUT}
# Redis: kombu's transport, except that a malformed message is logged and dropped instead of ending the
# worker (portal.broker_transport).
CELERY_BROKER_TRANSPORT = (
    "portal.broker_transport:Transport"
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://"))
    else None
)
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ALWAYS_EAGER = env_bool("TESSERA_CELERY_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "health-check": {"task": "portal.tasks.health_check_task", "schedule": crontab(minute="*/5")},
    # api: expired idempotency records and past rate-limit windows.
    "prune-api-records": {
        "task": "portal.api.tasks.prune_api_records_task",
        "schedule": crontab(minute="*/15"),
    },
}
# api: the API's tasks live in portal/api/tasks.py (not an app module autodiscover finds).
CELERY_IMPORTS = ["portal.api.tasks"]

# --- Scheduling, cluster backend, codespaces, telemetry ---------------------------------------------
TESSERA_BACKEND = env_choice("TESSERA_BACKEND", "simulated", ("simulated", "kubernetes"))
TESSERA_PLACEMENT_POLICY = env_str("TESSERA_PLACEMENT_POLICY", "tessera")
# How long a group's start-time estimates are reused (scheduling.services.start_estimates).
TESSERA_START_ESTIMATE_CACHE_SECONDS = env_int(
    "TESSERA_START_ESTIMATE_CACHE_SECONDS", 15, minimum=1
)
TESSERA_CYCLE_INTERVAL_SECONDS = env_float("TESSERA_CYCLE_INTERVAL_SECONDS", 5.0)
# Every page shows "Scheduling is down" and /healthz answers 503 when no scheduling cycle started for
# this long (portal.heartbeat): a dead worker, a dead beat or a broker that does not answer.
TESSERA_SCHEDULING_DOWN_AFTER_SECONDS = env_float("TESSERA_SCHEDULING_DOWN_AFTER_SECONDS", 60.0)
if TESSERA_SCHEDULING_DOWN_AFTER_SECONDS <= TESSERA_CYCLE_INTERVAL_SECONDS:
    raise ImproperlyConfigured(
        f"TESSERA_SCHEDULING_DOWN_AFTER_SECONDS={TESSERA_SCHEDULING_DOWN_AFTER_SECONDS}: must be more "
        f"than TESSERA_CYCLE_INTERVAL_SECONDS ({TESSERA_CYCLE_INTERVAL_SECONDS})"
    )
TESSERA_GPU_NODE_CPU_RESERVED_FRACTION = env_float("TESSERA_GPU_NODE_CPU_RESERVED_FRACTION", 0.25)
TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION = env_float(
    "TESSERA_GPU_NODE_MEMORY_RESERVED_FRACTION", 0.25
)
# GPU models this cluster cannot share (no MIG/HAMi slicing): a slice never lands on them.
TESSERA_WHOLE_CARD_ONLY_GPU_MODELS = env_list("TESSERA_WHOLE_CARD_ONLY_GPU_MODELS", [])
# The cross-node topology of every pool, widest first, as name=node-label-key (a pool overrides it in
# Shard.topology_levels): jobs ask for all their pods in one domain of a level (scheduling.topology).
TESSERA_TOPOLOGY_LEVELS = env_list(
    "TESSERA_TOPOLOGY_LEVELS",
    [
        "zone=topology.kubernetes.io/zone",
        "block=tessera.io/topology-block",
        "rack=tessera.io/topology-rack",
        "nvlink=nvidia.com/gpu.clique",
    ],
)
if len(TESSERA_TOPOLOGY_LEVELS) > 8 or not all(
    re.match(r"^[a-z][a-z0-9_-]{0,31}=[A-Za-z0-9./_-]{1,316}$", item)
    for item in TESSERA_TOPOLOGY_LEVELS
):
    raise ImproperlyConfigured(
        f"TESSERA_TOPOLOGY_LEVELS={','.join(TESSERA_TOPOLOGY_LEVELS)!r}: at most 8 comma-separated "
        "name=label-key items (names lowercase letters, digits, - and _)"
    )
TESSERA_SIM_INVENTORY = env_str("TESSERA_SIM_INVENTORY", "demo")
TESSERA_SIM_START_DELAY_SECONDS = env_float("TESSERA_SIM_START_DELAY_SECONDS", 3.0)
# Dynamic MIG (scheduling.services.mig_reconfig): the simulated card's reconfiguration time, GPU UUIDs
# whose reconfiguration fails (drills), and how long any backend may take before it times out.
TESSERA_SIM_MIG_RECONFIGURE_SECONDS = env_float("TESSERA_SIM_MIG_RECONFIGURE_SECONDS", 5.0)
TESSERA_SIM_MIG_FAIL_GPUS = env_list("TESSERA_SIM_MIG_FAIL_GPUS", [])
TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS = env_int(
    "TESSERA_MIG_RECONFIGURE_TIMEOUT_SECONDS", 900, minimum=10
)
TESSERA_KUBECONFIG = env_str("TESSERA_KUBECONFIG", "")
TESSERA_KUBE_CONTEXT = env_str("TESSERA_KUBE_CONTEXT", "")
TESSERA_KUBE_NAMESPACE = env_str("TESSERA_KUBE_NAMESPACE", "tessera-workloads")
TESSERA_KUBE_MODE = env_choice(
    "TESSERA_KUBE_MODE", "hami-delegate", ("hami-delegate", "hami-bind", "koordinator", "dra")
)
# dra mode: the DRA driver (attribute domain of the claims' CEL selectors) and DeviceClass -> quota unit
TESSERA_KUBE_DRA_DRIVER = env_str("TESSERA_KUBE_DRA_DRIVER", "gpu.nvidia.com")
TESSERA_KUBE_DRA_DEVICE_CLASSES = env_str(
    "TESSERA_KUBE_DRA_DEVICE_CLASSES", "gpu.nvidia.com=gpu,mig.nvidia.com=mig"
)
# dynamic MIG (device-plugin modes): the mig-parted ConfigMap NVIDIA's MIG manager reads, and its namespace
TESSERA_KUBE_MIG_CONFIG_MAP = env_str("TESSERA_KUBE_MIG_CONFIG_MAP", "tessera-mig-parted-config")
TESSERA_KUBE_MIG_CONFIG_NAMESPACE = env_str("TESSERA_KUBE_MIG_CONFIG_NAMESPACE", "gpu-operator")
TESSERA_KUBE_STORAGE_CLASS = env_str("TESSERA_KUBE_STORAGE_CLASS", "")
TESSERA_KUBE_RUNTIME_CLASS = env_str("TESSERA_KUBE_RUNTIME_CLASS", "")
TESSERA_KUBE_FAKE = env_bool("TESSERA_KUBE_FAKE", False)
TESSERA_CODESPACE_IMAGE_PULL_POLICY = env_choice(
    "TESSERA_CODESPACE_IMAGE_PULL_POLICY", "IfNotPresent", ("Always", "IfNotPresent", "Never")
)
TESSERA_CODESPACE_PORT = env_int("TESSERA_CODESPACE_PORT", 8080, minimum=1)
TESSERA_IDE_URL_PATTERN = env_str(
    "TESSERA_IDE_URL_PATTERN", "https://{name}.codespaces.example.com/"
)
TESSERA_SSH_COMMAND_PATTERN = env_str(
    "TESSERA_SSH_COMMAND_PATTERN", "ssh {user}@{name}.codespaces.example.com"
)
TESSERA_PROMETHEUS_URL = env_str("TESSERA_PROMETHEUS_URL", "")
TESSERA_METRICS_TOKEN = env_secret("TESSERA_METRICS_TOKEN") or ""

# scheduling: shard queues, cycle size, beat (cycles, status sync, reconcilers, inventory sync).
TESSERA_SCHEDULING_QUEUES = env_int("TESSERA_SCHEDULING_QUEUES", 4, minimum=1)
TESSERA_CYCLE_MAX_WORKLOADS = env_int("TESSERA_CYCLE_MAX_WORKLOADS", 5000, minimum=1)
# after a burst, the first idle cycle collects and freezes the worker's heap (scheduling.services.heap)
TESSERA_GC_SETTLE_SECONDS = max(0.0, env_float("TESSERA_GC_SETTLE_SECONDS", 2.0))
TESSERA_RECONCILE_INTERVAL_SECONDS = env_float("TESSERA_RECONCILE_INTERVAL_SECONDS", 30.0)
TESSERA_INVENTORY_SYNC_SECONDS = env_float("TESSERA_INVENTORY_SYNC_SECONDS", 300.0)
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update(  # type: ignore[union-attr,attr-defined]
    {
        "WorkloadStateEnum": "scheduling.choices.WorkloadState",
        "GangStateEnum": "scheduling.choices.GangState",
    }
)
CELERY_BEAT_SCHEDULE["scheduling-cycles"] = {
    "task": "scheduling.tasks.schedule_cycles_task",
    "schedule": TESSERA_CYCLE_INTERVAL_SECONDS,
}
CELERY_BEAT_SCHEDULE["scheduling-sync-status"] = {
    "task": "scheduling.tasks.sync_status_task",
    "schedule": TESSERA_CYCLE_INTERVAL_SECONDS,
}
CELERY_BEAT_SCHEDULE["scheduling-reconcile"] = {
    "task": "scheduling.tasks.reconcile_task",
    "schedule": TESSERA_RECONCILE_INTERVAL_SECONDS,
}
CELERY_BEAT_SCHEDULE["scheduling-mig-reconfigurations"] = {
    "task": "scheduling.tasks.drive_mig_reconfigurations_task",
    "schedule": TESSERA_CYCLE_INTERVAL_SECONDS,
}
CELERY_BEAT_SCHEDULE["scheduling-sync-inventory"] = {
    "task": "scheduling.tasks.sync_inventory_task",
    "schedule": TESSERA_INVENTORY_SYNC_SECONDS,
}
# scheduling (Kubernetes backend): delete pods of workloads no longer placed/running (no-op on the
# simulated cluster), on the reconcile interval.
CELERY_BEAT_SCHEDULE["scheduling-reconcile-backend-orphans"] = {
    "task": "scheduling.tasks.reconcile_backend_orphans_task",
    "schedule": TESSERA_RECONCILE_INTERVAL_SECONDS,
}

# scheduling: the invariant auditor (scheduling.services.audit): how often beat runs it, how old a
# transient mismatch must be before it counts, how many findings per invariant a run keeps.
TESSERA_AUDIT_INTERVAL_SECONDS = env_float("TESSERA_AUDIT_INTERVAL_SECONDS", 60.0)
TESSERA_AUDIT_GRACE_SECONDS = env_float(
    "TESSERA_AUDIT_GRACE_SECONDS", 2 * TESSERA_CYCLE_INTERVAL_SECONDS + 30.0
)
TESSERA_AUDIT_MAX_FINDINGS = env_int("TESSERA_AUDIT_MAX_FINDINGS", 50, minimum=1)
CELERY_BEAT_SCHEDULE["scheduling-audit-invariants"] = {
    "task": "scheduling.tasks.audit_invariants_task",
    "schedule": TESSERA_AUDIT_INTERVAL_SECONDS,
}


# scheduling: safe defragmentation (scheduling.services.defrag, docs/scheduling.md "Defragmentation"). The
# disruption policy: how long work must have run before it may move, the budget per team (moves a day, share
# of its running work at once), per-plan limits, exemptions; scheduled runs act only inside a maintenance
# window (UTC "HH:MM-HH:MM", comma-separated) or when the waiting GPU demand a plan unlocks reaches the
# threshold (GPUs; 0 = never outside a window). Scheduled runs are off unless TESSERA_DEFRAG_SCHEDULED.
def _bounded_int(name: str, default: int, low: int, high: int) -> int:
    value = env_int(name, default, minimum=low)
    if value > high:
        raise ImproperlyConfigured(f"{name}={value}: must be at most {high}")
    return value


TESSERA_DEFRAG_PLAN_TTL_SECONDS = _bounded_int("TESSERA_DEFRAG_PLAN_TTL_SECONDS", 900, 30, 86_400)
TESSERA_DEFRAG_MIN_RUNTIME_SECONDS = _bounded_int(
    "TESSERA_DEFRAG_MIN_RUNTIME_SECONDS", 1800, 0, 7 * 86_400
)
TESSERA_DEFRAG_MAX_TOTAL_COST_SECONDS = _bounded_int(
    "TESSERA_DEFRAG_MAX_TOTAL_COST_SECONDS", 3600, 0, 7 * 86_400
)
TESSERA_DEFRAG_MAX_MOVES_PER_PLAN = _bounded_int("TESSERA_DEFRAG_MAX_MOVES_PER_PLAN", 5, 1, 200)
TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY = _bounded_int(
    "TESSERA_DEFRAG_MAX_MOVES_PER_TEAM_PER_DAY", 2, 0, 1000
)
TESSERA_DEFRAG_MAX_TEAM_RUNNING_PERCENT = _bounded_int(
    "TESSERA_DEFRAG_MAX_TEAM_RUNNING_PERCENT", 25, 0, 100
)
TESSERA_DEFRAG_MAX_COST_SECONDS_PER_MOVE = _bounded_int(
    "TESSERA_DEFRAG_MAX_COST_SECONDS_PER_MOVE", 1800, 0, 86_400
)
TESSERA_DEFRAG_CODESPACE_RESTART_SECONDS = _bounded_int(
    "TESSERA_DEFRAG_CODESPACE_RESTART_SECONDS", 120, 0, 86_400
)
TESSERA_DEFRAG_JOB_RESTART_SECONDS = _bounded_int(
    "TESSERA_DEFRAG_JOB_RESTART_SECONDS", 600, 0, 86_400
)
TESSERA_DEFRAG_DEMAND_THRESHOLD_GPUS = _bounded_int(
    "TESSERA_DEFRAG_DEMAND_THRESHOLD_GPUS", 8, 0, 100_000
)
TESSERA_DEFRAG_SCHEDULED = env_bool("TESSERA_DEFRAG_SCHEDULED", False)
TESSERA_DEFRAG_INTERVAL_SECONDS = env_float("TESSERA_DEFRAG_INTERVAL_SECONDS", 900.0)
TESSERA_DEFRAG_WINDOWS = env_list("TESSERA_DEFRAG_WINDOWS", ["01:00-05:00"])
for _window in TESSERA_DEFRAG_WINDOWS:
    if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d-([01]\d|2[0-3]):[0-5]\d", _window):
        raise ImproperlyConfigured(
            f"TESSERA_DEFRAG_WINDOWS: {_window[:20]!r} is not a UTC window like 01:00-05:00"
        )
TESSERA_DEFRAG_EXEMPT_TENANTS = env_list("TESSERA_DEFRAG_EXEMPT_TENANTS", [])
TESSERA_DEFRAG_EXEMPT_QUOTAS = env_list("TESSERA_DEFRAG_EXEMPT_QUOTAS", [])
CELERY_BEAT_SCHEDULE["scheduling-defrag"] = {
    "task": "scheduling.tasks.defrag_pools_task",
    "schedule": TESSERA_DEFRAG_INTERVAL_SECONDS,
}

# telemetry (scheduling.telemetry, dashboards): ingest every minute, prune hourly; prices per GPU-hour.
CELERY_BEAT_SCHEDULE["ingest-telemetry"] = {
    "task": "scheduling.telemetry.tasks.ingest_telemetry_task",
    "schedule": crontab(minute="*"),
}
CELERY_BEAT_SCHEDULE["prune-telemetry"] = {
    "task": "scheduling.telemetry.tasks.prune_telemetry_task",
    "schedule": crontab(minute="17"),
}
# Model names match exactly (case-insensitively): "L4" never prices an L40S, so every model of the demo
# cluster (H100, A100, L40S, T4) has its own price.
TESSERA_GPU_HOUR_PRICES = env_str(
    "TESSERA_GPU_HOUR_PRICES", "H100=4.0,A100=2.5,L40S=1.8,L4=0.8,T4=0.4,default=1.0"
)
# The currency chargeback prices and charges are in (an ISO 4217 code, shown next to every amount).
TESSERA_CHARGEBACK_CURRENCY = env_str("TESSERA_CHARGEBACK_CURRENCY", "USD")
if not re.fullmatch(r"[A-Z]{3}", TESSERA_CHARGEBACK_CURRENCY):
    raise ImproperlyConfigured(
        f"TESSERA_CHARGEBACK_CURRENCY={TESSERA_CHARGEBACK_CURRENCY[:20]!r}: use a three-letter "
        "ISO 4217 code such as USD or EUR"
    )
TESSERA_DASHBOARD_REFRESH_SECONDS = env_int("TESSERA_DASHBOARD_REFRESH_SECONDS", 60, minimum=5)
# chargeback: teams (slugs) whose workloads are the platform's own, billed as platform overhead.
TESSERA_CHARGEBACK_PLATFORM_TEAMS = env_list("TESSERA_CHARGEBACK_PLATFORM_TEAMS", [])

# telemetry: GPU health rules (scheduling.telemetry.health_rules, checked against their bounds there):
# fatal XIDs mark the GPU unhealthy, drain XIDs drain its node; temperature and power trip after
# TRIP_AFTER readings above MAX and recover after CLEAR_AFTER readings below CLEAR; a GPU that tripped
# MAX_AUTO_TRIPS times within FLAP_WINDOW_HOURS stays out; DRAIN_NODE_AT unhealthy GPUs drain a node
# (0 = never). Operators are told by email (TESSERA_OPERATOR_EMAILS) and/or a webhook.
TESSERA_HEALTH_RULES_ENABLED = env_bool("TESSERA_HEALTH_RULES_ENABLED", True)
TESSERA_HEALTH_FATAL_XIDS = env_list(
    "TESSERA_HEALTH_FATAL_XIDS", ["48", "62", "64", "74", "79", "94", "95"]
)
TESSERA_HEALTH_DRAIN_XIDS = env_list("TESSERA_HEALTH_DRAIN_XIDS", [])
TESSERA_HEALTH_TEMPERATURE_MAX_C = env_float("TESSERA_HEALTH_TEMPERATURE_MAX_C", 90.0)
TESSERA_HEALTH_TEMPERATURE_CLEAR_C = env_float("TESSERA_HEALTH_TEMPERATURE_CLEAR_C", 80.0)
TESSERA_HEALTH_POWER_MAX_W = env_float("TESSERA_HEALTH_POWER_MAX_W", 750.0)
TESSERA_HEALTH_POWER_CLEAR_W = env_float("TESSERA_HEALTH_POWER_CLEAR_W", 650.0)
TESSERA_HEALTH_TRIP_AFTER = env_int("TESSERA_HEALTH_TRIP_AFTER", 3, minimum=1)
TESSERA_HEALTH_CLEAR_AFTER = env_int("TESSERA_HEALTH_CLEAR_AFTER", 10, minimum=1)
TESSERA_HEALTH_MAX_AUTO_TRIPS = env_int("TESSERA_HEALTH_MAX_AUTO_TRIPS", 3, minimum=1)
TESSERA_HEALTH_FLAP_WINDOW_HOURS = env_float("TESSERA_HEALTH_FLAP_WINDOW_HOURS", 24.0)
TESSERA_HEALTH_DRAIN_NODE_AT = env_int("TESSERA_HEALTH_DRAIN_NODE_AT", 0, minimum=0)
TESSERA_OPERATOR_EMAILS = env_list("TESSERA_OPERATOR_EMAILS", [])
TESSERA_OPERATOR_WEBHOOK_URL = env_str("TESSERA_OPERATOR_WEBHOOK_URL", "")
# polite reclaim (quotas.reclaim_notices): a quota's checkpoint webhook is signed with HMAC-SHA256 of
# the body under this secret (header X-Tessera-Signature: sha256=<hex>; empty = unsigned) and called
# with this timeout (seconds, 0.5 to 30).
TESSERA_CHECKPOINT_HOOK_SECRET = env_secret("TESSERA_CHECKPOINT_HOOK_SECRET") or ""
TESSERA_CHECKPOINT_HOOK_TIMEOUT_SECONDS = min(
    30.0, max(0.5, env_float("TESSERA_CHECKPOINT_HOOK_TIMEOUT_SECONDS", 5.0))
)
SPECTACULAR_SETTINGS.setdefault("ENUM_NAME_OVERRIDES", {}).update(  # type: ignore[union-attr,attr-defined]
    {"DeliveryStateEnum": "quotas.models.DeliveryState"}
)
CELERY_BEAT_SCHEDULE["evaluate-gpu-health"] = {
    "task": "scheduling.telemetry.tasks.evaluate_gpu_health_task",
    "schedule": crontab(minute="*"),
}
# waste reports (codespaces.services.waste): an hour of a workload below IDLE_PERCENT use of its
# allocation is idle; reports cover WINDOW_DAYS; the weekly digest goes to each team's admins (email)
# and to TESSERA_WASTE_WEBHOOK_URL, Mondays 07:00 UTC.
TESSERA_WASTE_IDLE_PERCENT = env_float("TESSERA_WASTE_IDLE_PERCENT", 5.0)
TESSERA_WASTE_WINDOW_DAYS = env_int("TESSERA_WASTE_WINDOW_DAYS", 7, minimum=1)
TESSERA_WASTE_WEBHOOK_URL = env_str("TESSERA_WASTE_WEBHOOK_URL", "")
TESSERA_PORTAL_URL = env_str("TESSERA_PORTAL_URL", "http://localhost:8000")
CELERY_BEAT_SCHEDULE["waste-digests"] = {
    "task": "codespaces.tasks.send_waste_digests_task",
    "schedule": crontab(minute="0", hour="7", day_of_week="1"),
}

# codespaces: idle auto-stop check (warn, then stop idle running codespaces per template policy).
TESSERA_CODESPACE_IDLE_CHECK_SECONDS = env_float("TESSERA_CODESPACE_IDLE_CHECK_SECONDS", 60.0)
CELERY_BEAT_SCHEDULE["codespaces-idle-check"] = {
    "task": "codespaces.tasks.check_idle_codespaces_task",
    "schedule": TESSERA_CODESPACE_IDLE_CHECK_SECONDS,
}
TESSERA_CODESPACE_RECONCILE_SECONDS = env_float("TESSERA_CODESPACE_RECONCILE_SECONDS", 15.0)
CELERY_BEAT_SCHEDULE["codespaces-reconcile"] = {
    "task": "codespaces.tasks.reconcile_codespaces_task",
    "schedule": TESSERA_CODESPACE_RECONCILE_SECONDS,
}

# quotas (fairness over time, docs/quotas.md): loan expiry and GPU-hour budget notices.
TESSERA_QUOTA_LOAN_EXPIRY_SECONDS = env_float("TESSERA_QUOTA_LOAN_EXPIRY_SECONDS", 60.0)
CELERY_BEAT_SCHEDULE["quotas-expire-loans"] = {
    "task": "quotas.tasks.expire_quota_loans_task",
    "schedule": TESSERA_QUOTA_LOAN_EXPIRY_SECONDS,
}
TESSERA_QUOTA_BUDGET_CHECK_SECONDS = env_float("TESSERA_QUOTA_BUDGET_CHECK_SECONDS", 300.0)
CELERY_BEAT_SCHEDULE["quotas-budget-alerts"] = {
    "task": "quotas.tasks.check_budget_alerts_task",
    "schedule": TESSERA_QUOTA_BUDGET_CHECK_SECONDS,
}

# Every beat entry is a sweep of the current state: beat names it on each message (portal.celery), and a
# worker that fell behind skips the queued copies a later run already covered (portal.periodic).
for _name, _entry in CELERY_BEAT_SCHEDULE.items():
    _options = _entry.get("options")
    _entry["options"] = {
        **(_options if isinstance(_options, dict) else {}),
        "headers": {"tessera_sweep": _name},
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
