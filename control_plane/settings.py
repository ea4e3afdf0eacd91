"""Omnistage settings: one module, driven by the environment.

Every variable is documented in docs/configuration.md. A malformed value stops
start-up with one line naming the variable and the expected form.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import sys
from pathlib import Path

import dj_database_url

from control_plane.env import (
    DATABASE_SCHEMES,
    REDIS_SCHEMES,
    EnvError,
    env_bool,
    env_choice,
    env_colon_tuples,
    env_float,
    env_int,
    env_list,
    env_str,
    env_url,
)
from control_plane.system.body_limits import default_body_limits

BASE_DIR = Path(__file__).resolve().parent.parent


def _secret_key(var_dir: Path) -> str:
    configured = env_str("DJANGO_SECRET_KEY")
    if configured:
        return configured
    path = var_dir / "secret_key"
    if not path.exists():
        var_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


def _byte_count(name: str, text: str) -> int:
    if not text.isdigit():
        raise EnvError(name, "a comma list of path:bytes items, e.g. /v1/completions:2097152", text)
    return int(text)


def _networks(name: str) -> list[str]:
    networks = env_list(name, [])
    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise EnvError(name, "a comma list of networks, e.g. 10.1.2.0/24,fd00::/8", network) from None
    return networks


def _redis_to_celery(url: str) -> str:
    if url.startswith("unix://"):
        return "redis+socket://" + url.removeprefix("unix://")
    return url


try:
    VAR_DIR = Path(env_str("OMNISTAGE_VAR_DIR", str(BASE_DIR / "var"))).resolve()
    # Compiled kernels (AR decode layers, token2wav's DiT) outlive a replica: its restart reuses them.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(VAR_DIR / "cache" / "torchinductor"))
    DEBUG = env_bool("DJANGO_DEBUG", False)
    SECRET_KEY = _secret_key(VAR_DIR)
    ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
    CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
    _database_url = env_url("DATABASE_URL", DATABASE_SCHEMES, "postgres://user:pass@127.0.0.1:5432/omnistage")
    _redis_url = env_url("REDIS_URL", REDIS_SCHEMES, "redis://127.0.0.1:6379/0")
    HEARTBEAT_INTERVAL_S = env_float("OMNISTAGE_HEARTBEAT_INTERVAL", 2.0, minimum=0.1)
    HEARTBEAT_TTL_S = env_float("OMNISTAGE_HEARTBEAT_TTL", 10.0, minimum=0.5)
    LONGEST_TASK_S = env_int("OMNISTAGE_LONGEST_TASK_S", 1800, minimum=1)
    VISIBILITY_TIMEOUT_S = env_int("OMNISTAGE_VISIBILITY_TIMEOUT_S", 3600, minimum=1)
    DB_POOL_SIZE = env_int("OMNISTAGE_DB_POOL_SIZE", 10, minimum=1)
    DB_POOL_TIMEOUT_S = env_float("OMNISTAGE_DB_POOL_TIMEOUT_S", 30.0, minimum=0.1)
    REDIS_POOL_SIZE = env_int("OMNISTAGE_REDIS_POOL_SIZE", 64, minimum=1)
    REDIS_POOL_TIMEOUT_S = env_float("OMNISTAGE_REDIS_POOL_TIMEOUT_S", 10.0, minimum=0.1)
    WEB_HOST = env_str("OMNISTAGE_HOST", "127.0.0.1")
    WEB_PORT = env_int("OMNISTAGE_PORT", 8000, minimum=1)
    WEB_PROCESSES = env_int("OMNISTAGE_WEB_PROCESSES", os.cpu_count() or 1, minimum=1)
    WEB_ACCESS_LOG = env_bool("OMNISTAGE_WEB_ACCESS_LOG", False)
    WORKER_POOLS = env_list("OMNISTAGE_POOLS", ["cpu"])
    WORKER_CONCURRENCY = env_int("OMNISTAGE_WORKER_CONCURRENCY", 2, minimum=1)
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")

EMBEDDED_REDIS = _redis_url is None
EMBEDDED_REDIS_SOCKET = VAR_DIR / "redis" / "redis.sock"
REDIS_URL = _redis_url or f"unix://{EMBEDDED_REDIS_SOCKET}"

# SQLite takes one writer at a time: a writer waits up to 30 s for its turn, and a transaction
# takes the write lock when it begins (IMMEDIATE), since one that read first and writes later
# fails at once with "database is locked" when another wrote meanwhile (the busy timeout never
# applies to that case). WAL lets readers go on while one writes.
SQLITE_OPTIONS = {"timeout": 30, "init_command": "PRAGMA journal_mode=WAL;", "transaction_mode": "IMMEDIATE"}

if _database_url:
    # ASGI views reach the ORM from a thread per request, so persistent per-thread connections
    # pile up (one per concurrent request, idle until collected) and exhaust PostgreSQL's
    # max_connections; a bounded pool per process serves them instead, and waits when empty.
    DATABASES = {"default": dj_database_url.parse(_database_url, conn_max_age=0)}
    if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        DATABASES["default"].setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DB_POOL_SIZE,
            "timeout": DB_POOL_TIMEOUT_S,
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "omnistage.sqlite3",
            "OPTIONS": dict(SQLITE_OPTIONS),
            # a file, not memory, so that the live servers a test starts share it
            "TEST": {"NAME": VAR_DIR / "test.sqlite3"},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "control_plane.system",
    "control_plane.accounts",
    "control_plane.deployments",
    "control_plane.inference",
    "control_plane.orchestrator",
    "control_plane.registry",
    "control_plane.audit",
    "console",
]

# Every app of ours keeps its migrations under migrations/<label>/ (checked by system.E001).
OUR_APPS = ["system", "accounts", "deployments", "inference", "orchestrator", "registry", "audit", "console"]
MIGRATION_MODULES = {label: f"migrations.{label}" for label in OUR_APPS}

# Django's own middleware, with their hooks run in the event loop (control_plane/system/middleware.py)
MIDDLEWARE = [
    "control_plane.system.middleware.SecurityMiddleware",
    "control_plane.system.middleware.SessionMiddleware",
    "control_plane.system.middleware.CommonMiddleware",
    "control_plane.system.middleware.CsrfViewMiddleware",
    "control_plane.system.middleware.AuthenticationMiddleware",
    "control_plane.system.middleware.MessageMiddleware",
    "control_plane.system.middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "control_plane.urls"
ASGI_APPLICATION = "control_plane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_URL = "media/"
MEDIA_ROOT = Path(env_str("OMNISTAGE_MEDIA_ROOT", str(VAR_DIR / "media")))
MODELS_DIR = Path(env_str("OMNISTAGE_MODELS_DIR", str(VAR_DIR / "models")))
# further directories a deployment's model_dir may lie in (control_plane/deployments/model_paths.py)
MODEL_DIR_ROOTS = [Path(root) for root in env_list("OMNISTAGE_MODEL_DIR_ROOTS", [])]

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # a socket timeout above channels_redis's 5 s blocking read (redis-py 8 defaults to 5 s)
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}], "prefix": "omni:channels"},
    }
}

CELERY_BROKER_URL = _redis_to_celery(REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = WORKER_POOLS[0]
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "control_plane.system.api_schema.DocumentedErrorsSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "control_plane.accounts.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "control_plane.system.json_parser.CheckedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Omnistage API",
    "DESCRIPTION": "Pipelines, deployments, replicas, requests, usage and API keys.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

try:
    LOG_LEVEL = env_choice("OMNISTAGE_LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), "INFO")
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}

try:
    KNOWN_POOLS = env_list("OMNISTAGE_KNOWN_POOLS", sorted({*WORKER_POOLS, "cpu", "gpu"}))
    REPLICA_BACKOFF_BASE_S = env_float("OMNISTAGE_REPLICA_BACKOFF_BASE_S", 10.0, minimum=0.1)
    REPLICA_BACKOFF_MAX_S = env_float("OMNISTAGE_REPLICA_BACKOFF_MAX_S", 300.0, minimum=0.1)
    ROLLOUT_READY_TIMEOUT_S = env_float("OMNISTAGE_ROLLOUT_READY_TIMEOUT_S", 600.0, minimum=1.0)
    WARMUP_TIMEOUT_S = env_float("OMNISTAGE_WARMUP_TIMEOUT_S", 300.0, minimum=1.0)
    REQUEST_STREAM_TTL_S = env_int("OMNISTAGE_REQUEST_STREAM_TTL_S", 600, minimum=10)
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")

# Demo deployments `make run` creates (name:pipeline:tiny checkpoint), comma-separated; empty for none.
try:
    DEMO_DEPLOYMENTS = env_colon_tuples(
        "OMNISTAGE_DEMO",
        ["tiny-llm:llm:smollm2-135m-instruct", "tiny-omni:qwen2_5_omni:qwen2_5_omni", "tiny-image:text_to_image:sd3"],
        ("name", "pipeline", "checkpoint"),
    )
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")

AUTHENTICATION_BACKENDS = ["control_plane.accounts.backends.ThrottledModelBackend"]
try:
    ACCOUNTS_LOGIN_MAX_FAILURES = env_int("OMNISTAGE_LOGIN_MAX_FAILURES", 5, minimum=1)
    ACCOUNTS_LOGIN_MAX_FAILURES_PER_IP = env_int("OMNISTAGE_LOGIN_MAX_FAILURES_PER_IP", 50, minimum=1)
    ACCOUNTS_LOGIN_WINDOW_S = env_int("OMNISTAGE_LOGIN_WINDOW_S", 900, minimum=1)
    ACCOUNTS_QUOTA_LEASE_S = env_int("OMNISTAGE_QUOTA_LEASE_S", 600, minimum=1)
    ACCOUNTS_QUOTA_RULES_TTL_S = env_float("OMNISTAGE_QUOTA_RULES_TTL_S", 5.0, minimum=0)
    ACCOUNTS_KEY_CACHE_TTL_S = env_float("OMNISTAGE_KEY_CACHE_TTL_S", 300.0, minimum=0)
    DEPLOYMENT_CACHE_TTL_S = env_float("OMNISTAGE_DEPLOYMENT_CACHE_TTL_S", 30.0, minimum=0)
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")

try:
    MAX_REQUEST_BYTES = env_int("OMNISTAGE_MAX_REQUEST_BYTES", 20 * 1024 * 1024, minimum=1024)
    BODY_LIMITS = {
        **default_body_limits(MAX_REQUEST_BYTES),
        **{path: _byte_count("OMNISTAGE_BODY_LIMITS", size) for path, size in
           env_colon_tuples("OMNISTAGE_BODY_LIMITS", [], ("path", "bytes"))},
    }  # fmt: skip
    PROMPT_MAX_CHARS_PER_TOKEN = env_float("OMNISTAGE_PROMPT_MAX_CHARS_PER_TOKEN", 16.0, minimum=1.0)
    MAX_MEDIA_BYTES = env_int("OMNISTAGE_MAX_MEDIA_BYTES", 10 * 1024 * 1024, minimum=1024)
    METRICS_TOKEN = env_str("OMNISTAGE_METRICS_TOKEN", "")
    FETCH_MEDIA_URLS = env_bool("OMNISTAGE_FETCH_MEDIA_URLS", False)
    MEDIA_URL_HOSTS = env_list("OMNISTAGE_MEDIA_URL_HOSTS", [])
    MEDIA_URL_ALLOWED_NETWORKS = _networks("OMNISTAGE_MEDIA_URL_ALLOWED_NETWORKS")
    MEDIA_FETCH_TIMEOUT_S = env_float("OMNISTAGE_MEDIA_FETCH_TIMEOUT_S", 10.0, minimum=0.1)
    REALTIME_KEY_CHECK_S = env_float("OMNISTAGE_REALTIME_KEY_CHECK_S", 5.0, minimum=0.1)
    SERVING_IDLE_TIMEOUT_S = env_float("OMNISTAGE_SERVING_IDLE_TIMEOUT_S", 120.0, minimum=1.0)
    ARTIFACT_URL_TTL_S = env_int("OMNISTAGE_ARTIFACT_URL_TTL_S", 3600, minimum=1)
    HISTORY_RETENTION_DAYS = env_float("OMNISTAGE_HISTORY_RETENTION_DAYS", 30.0, minimum=0.0)  # 0 keeps everything
    HISTORY_CLEANUP_INTERVAL_S = env_float("OMNISTAGE_HISTORY_CLEANUP_INTERVAL_S", 3600.0, minimum=1.0)
    # a `running` row whose serving process stopped renewing its lease this long ago is closed as failed
    HISTORY_ORPHAN_GRACE_S = env_float("OMNISTAGE_HISTORY_ORPHAN_GRACE_S", 60.0, minimum=10.0)
except EnvError as error:
    sys.exit(f"omnistage: configuration error: {error}")
LOGIN_URL = "console:login"
