"""The configured cluster backend (`settings.TESSERA_BACKEND`): "simulated" (default) or "kubernetes"."""

from __future__ import annotations

from django.conf import settings

from scheduling.backends.base import Backend

_instances: dict[str, Backend] = {}


def get_backend(name: str | None = None) -> Backend:
    """The backend instance for `name` (default: settings.TESSERA_BACKEND), created once per process.

    The Kubernetes backend is imported lazily: the simulated cluster needs no kubernetes client.
    """
    key = name or settings.TESSERA_BACKEND
    backend = _instances.get(key)
    if backend is None:
        if key == "kubernetes":
            from scheduling.backends.kubernetes.backend import from_settings

            backend = from_settings()
        elif key == "simulated":
            from scheduling.backends.simulated.backend import SimulatedBackend

            backend = SimulatedBackend()
        else:
            raise ValueError(f"unknown TESSERA_BACKEND {key!r}: use 'simulated' or 'kubernetes'")
        _instances[key] = backend
    return backend


def reset_backends() -> None:
    """Forget the cached instances (tests that change settings)."""
    _instances.clear()
