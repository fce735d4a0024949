"""The Kubernetes backend: HAMi (delegate or bind) and Koordinator, through one gateway.

Django-free except `backend.from_settings`. Only `gateway` imports the `kubernetes` client.
See docs/kubernetes.md.
"""

from scheduling.backends.kubernetes.backend import KubernetesBackend, from_settings
from scheduling.backends.kubernetes.config import KubeConfig
from scheduling.backends.kubernetes.constants import Mode

__all__ = ["KubeConfig", "KubernetesBackend", "Mode", "from_settings"]
