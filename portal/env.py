"""Typed readers for environment variables. Every variable is documented in docs/configuration.md.

Unknown or malformed values fail loudly at start-up (ImproperlyConfigured) instead of being guessed.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r}: use 'true' or 'false'")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a whole number") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value}: must be at least {minimum}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r}: expected a number") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, default) or default
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r}: choose one of {', '.join(choices)}")
    return value


def env_secret(name: str) -> str | None:
    """Read NAME, or the contents of the file named by NAME_FILE (Kubernetes Secret mounts)."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r}: cannot read it ({exc})") from exc
    return None


def dev_secret_key(var_dir: Path) -> str:
    """A random key generated once for this checkout and kept in var/ (development only)."""
    from django.core.management.utils import get_random_secret_key

    var_dir.mkdir(parents=True, exist_ok=True)
    key_file = var_dir / "secret_key"
    if not key_file.exists():
        key_file.write_text(get_random_secret_key())
        key_file.chmod(0o600)
    return key_file.read_text().strip()


# Values that are placeholders, not secrets (lower-cased); Django's own check asks for 50 characters.
_PLACEHOLDER_SECRETS = {"changeme", "change-me", "secret", "secret_key", "insecure", "dev", "test"}
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_DISTINCT = 5


def refuse_unsafe_production(*, debug: bool, secret_key: str, allowed_hosts: list[str]) -> None:
    """TESSERA_ENV=production with a development convenience left on: ImproperlyConfigured naming the
    variable, at settings import, so manage.py, gunicorn and celery all refuse to start."""
    if debug:
        raise ImproperlyConfigured(
            "DEBUG=true is not allowed when TESSERA_ENV=production: it shows settings and stack "
            "traces to anyone; unset DEBUG or set DEBUG=false."
        )
    weak = (
        secret_key.strip().lower() in _PLACEHOLDER_SECRETS
        or secret_key.startswith("django-insecure-")
        or len(secret_key) < SECRET_KEY_MIN_LENGTH
        or len(set(secret_key)) < SECRET_KEY_MIN_DISTINCT
    )
    if weak:
        raise ImproperlyConfigured(
            f"SECRET_KEY is not safe for TESSERA_ENV=production: use a random value of at least "
            f"{SECRET_KEY_MIN_LENGTH} characters (python -c 'from django.core.management.utils import "
            "get_random_secret_key; print(get_random_secret_key())'), not a placeholder."
        )
    wildcards = [host for host in allowed_hosts if host in ("*", ".") or host.startswith("*")]
    if wildcards:
        raise ImproperlyConfigured(
            f"ALLOWED_HOSTS={','.join(allowed_hosts)!s} is not allowed when TESSERA_ENV=production: "
            "list the host names the portal is served under (wildcards accept any Host header)."
        )
