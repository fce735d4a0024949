"""Configuration of the Kubernetes backend as one plain, validated value (no Django here)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.backends.kubernetes.constants import Mode

_PULL_POLICIES = ("Always", "IfNotPresent", "Never")


@dataclass(frozen=True, slots=True)
class KubeConfig:
    """How Tessera talks to one cluster and shapes the objects it creates.

    `kubeconfig` "" means in-cluster credentials (the ServiceAccount of the Helm chart).
    """

    kubeconfig: str = ""
    context: str = ""
    namespace: str = "tessera-workloads"
    mode: Mode = Mode.HAMI_DELEGATE
    image_pull_policy: str = "IfNotPresent"
    codespace_port: int = 8080
    storage_class: str = ""  # "" = the cluster's default StorageClass
    runtime_class: str = ""  # set when the HAMi chart uses a RuntimeClass (hami-bind needs it)
    hami_scheduler_name: str = "hami-scheduler"
    bind_scheduler_name: str = "tessera"  # served by nobody: pods wait until Tessera binds them
    koord_scheduler_name: str = "koord-scheduler"
    gang_waiting_time: str = "300s"
    request_timeout_seconds: float = 30.0
    watch_timeout_seconds: int = 1  # sync_status blocks this long on an idle watch

    def __post_init__(self) -> None:
        if not isinstance(self.mode, Mode):
            try:
                object.__setattr__(self, "mode", Mode(self.mode))
            except ValueError as exc:
                modes = ", ".join(m.value for m in Mode)
                raise ValueError(f"unknown Kubernetes mode {self.mode!r}; use {modes}") from exc
        if self.image_pull_policy not in _PULL_POLICIES:
            raise ValueError(
                f"image pull policy {self.image_pull_policy!r}; use {', '.join(_PULL_POLICIES)}"
            )
        if not self.namespace:
            raise ValueError("the managed namespace must not be empty")
        if not 1 <= self.codespace_port <= 65535:
            raise ValueError(f"codespace port {self.codespace_port} is out of range")
