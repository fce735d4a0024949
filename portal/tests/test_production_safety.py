"""Production mode refuses unsafe settings at start-up, in every process that imports the settings
(manage.py, gunicorn, celery), with a message naming the variable; the proxy's SSL header is trusted
only when configured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GOOD_SECRET = "x" * 20 + "production-secret-key-with-enough-entropy-1234567890"


def _production_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    dropped = {"DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE", "DEBUG", "DATABASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        TESSERA_ENV="production",
        SECRET_KEY=GOOD_SECRET,
        ALLOWED_HOSTS="tessera.example.com",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        TESSERA_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    env.update(overrides)
    return env


def _run(args: list[str], env: dict[str, str], timeout: float = 120) -> Any:
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def _import_settings(tmp_path: Path, **overrides: str) -> Any:
    return _run(
        [sys.executable, "-c", "import portal.settings"], _production_env(tmp_path, **overrides)
    )


UNSAFE = [
    ("DEBUG", {"DEBUG": "true"}),
    ("SECRET_KEY", {"SECRET_KEY": "changeme"}),
    ("SECRET_KEY", {"SECRET_KEY": "django-insecure-" + "a1b2c3d4e5" * 5}),
    ("SECRET_KEY", {"SECRET_KEY": "short-but-not-a-placeholder"}),
    ("ALLOWED_HOSTS", {"ALLOWED_HOSTS": "*"}),
    ("ALLOWED_HOSTS", {"ALLOWED_HOSTS": "tessera.example.com,*"}),
]


@pytest.mark.parametrize(("variable", "overrides"), UNSAFE)
def test_production_settings_refuse_an_unsafe_value_naming_the_variable(
    tmp_path: Path, variable: str, overrides: dict[str, str]
) -> None:
    result = _import_settings(tmp_path, **overrides)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert f"{variable}" in result.stderr.strip().splitlines()[-1]


def test_production_settings_with_safe_values_import(tmp_path: Path) -> None:
    result = _import_settings(tmp_path)
    assert result.returncode == 0, result.stderr


def test_development_keeps_its_conveniences(tmp_path: Path) -> None:
    result = _import_settings(tmp_path, TESSERA_ENV="development", DEBUG="true", ALLOWED_HOSTS="*")
    assert result.returncode == 0, result.stderr


def test_gunicorn_refuses_to_start_in_unsafe_production(tmp_path: Path) -> None:
    env = _production_env(tmp_path, DEBUG="true")
    result = _run(
        [str(BIN / "gunicorn"), "portal.wsgi", "--bind", "127.0.0.1:0", "--workers", "1"],
        env,
        timeout=60,
    )
    assert result.returncode != 0
    assert "DEBUG=true is not allowed when TESSERA_ENV=production" in result.stderr


def test_celery_worker_refuses_to_start_in_unsafe_production(tmp_path: Path) -> None:
    env = _production_env(tmp_path, SECRET_KEY="changeme", CELERY_BROKER_URL="memory://")
    result = _run(
        [str(BIN / "celery"), "-A", "portal", "worker", "--pool", "solo", "--loglevel", "ERROR"],
        env,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def _proxy_header(tmp_path: Path, **overrides: str) -> str:
    code = "from django.conf import settings; print(getattr(settings, 'SECURE_PROXY_SSL_HEADER', None))"
    result = _run([sys.executable, "-c", code], _production_env(tmp_path, **overrides))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_proxy_ssl_header_is_trusted_only_when_configured(tmp_path: Path) -> None:
    assert _proxy_header(tmp_path) == "None"
    trusted = _proxy_header(tmp_path, TESSERA_TRUST_PROXY_SSL_HEADER="true")
    assert trusted == "('HTTP_X_FORWARDED_PROTO', 'https')"
