"""Configuration of the Kubernetes backend as one plain, validated value (no Django here)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from scheduling.backends.kubernetes.constants import Mode

_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DRA_UNITS = ("gpu", "mig")


def parse_device_classes(text: str) -> tuple[tuple[str, str], ...]:
    """``"gpu.nvidia.com=gpu,mig.nvidia.com=mig"`` -> the DeviceClass -> quota unit pairs (validated by
    KubeConfig); a malformed entry raises ValueError naming it."""
    pairs = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, sep, unit = entry.partition("=")
        if not sep or not name.strip() or not unit.strip():
            raise ValueError(f"DeviceClass mapping {entry[:80]!r}: use <class>=<gpu|mig>")
        pairs.append((name.strip(), unit.strip()))
    return tuple(pairs)


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
    # dra mode: the DRA driver whose devices Tessera pins (its attribute domain in CEL) and the
    # DeviceClass -> quota unit mapping ("gpu" = a whole card, "mig" = one MIG instance). A claim
    # uses the class mapped to the unit of the placement; a class missing from it is never used.
    dra_driver: str = "gpu.nvidia.com"
    dra_device_classes: tuple[tuple[str, str], ...] = (
        ("gpu.nvidia.com", "gpu"),
        ("mig.nvidia.com", "mig"),
    )
    # dynamic MIG (device-plugin modes): the ConfigMap holding the mig-parted config NVIDIA's MIG manager
    # reads (the ClusterPolicy's migManager.config.name) and its namespace (kubernetes/mig_manager.py)
    mig_config_map: str = "tessera-mig-parted-config"
    mig_config_namespace: str = "gpu-operator"

    def device_class(self, unit: str) -> str:
        """The DeviceClass a claim for one device of ``unit`` (``gpu`` or ``mig``) names; "" if none."""
        return next((name for name, u in self.dra_device_classes if u == unit), "")

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
        if not _DNS_SUBDOMAIN.match(self.dra_driver):
            raise ValueError(f"DRA driver {self.dra_driver!r} is not a DNS subdomain")
        for device_class, unit in self.dra_device_classes:
            if not _DNS_SUBDOMAIN.match(device_class) or unit not in DRA_UNITS:
                raise ValueError(
                    f"DeviceClass mapping {device_class!r}={unit!r}: a DNS name mapped to "
                    f"{' or '.join(DRA_UNITS)}"
                )
        if not 1 <= self.codespace_port <= 65535:
            raise ValueError(f"codespace port {self.codespace_port} is out of range")
