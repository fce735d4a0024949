"""Dynamic MIG through NVIDIA's MIG manager (device-plugin modes), as plain data.

NVIDIA's k8s-mig-manager (GPU Operator) reconfigures a node when its label ``nvidia.com/mig.config`` names a
config of its mig-parted config file, and reports progress in ``nvidia.com/mig.config.state``: ``pending``
while it works (``rebooting`` with WITH_REBOOT), then ``success`` or ``failed``. The config file is
mig-parted's ``version: v1`` spec: ``mig-configs`` maps a config name to a list of entries, each with
``devices`` (``all`` or a list of GPU indices), ``mig-enabled`` and ``mig-devices`` (profile -> count, required
when MIG is enabled, empty when not). Sources: NVIDIA/mig-parted ``api/spec/v1/spec.go`` (the spec and its
validation) and ``deployments/gpu-operator`` / the GPU Operator's MIG docs (the two labels and their values).

The manager applies one named config per *node*, so Tessera writes a config that lists every dynamic MIG
card of the node with its layout (the cards it does not change keep theirs): `node_config` generates it,
`config_errors` validates it (each card's layout valid for its model, at most 7 instances), and the config's
name is derived from its content (`config_name`), so asking twice for the same layouts is the same label and
an idempotent write. mig-parted places instances itself and only counts per profile, so the config carries
counts; the pods ask the device plugin for a profile's resource (``nvidia.com/mig-1g.10gb``), never for a
position. The reconfiguration service only plans a change for an empty card and one change per node at a
time (`scheduling.services.mig_cards`), because the manager stops the GPU clients of the node while it works.

Pure: no ``kubernetes`` import, no I/O; the backend sends these through the gateway.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from core.placement.mig import layout_errors
from scheduling.backends.base import MigLayout, MigLayoutPhase, MigLayoutStatus

#: The node label the MIG manager watches: the name of the config to apply.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
#: The node label the MIG manager reports in: pending | rebooting | success | failed.
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
#: The key of the mig-parted config file in its ConfigMap.
CONFIG_KEY = "config.yaml"
#: The prefix of the configs Tessera writes (configs without it are the operator's, never touched).
CONFIG_PREFIX = "tessera-"
MAX_CONFIGS = 256

JsonDict = dict[str, Any]


def node_config(node_layouts: Sequence[tuple[int, MigLayout]]) -> list[JsonDict]:
    """The mig-parted entries of one node: per card (index order) MIG on, with its instances counted per
    profile (``mig-devices: {}`` for a card with no instance yet)."""
    return [
        {
            "devices": [index],
            "mig-enabled": True,
            "mig-devices": dict(sorted(Counter(p for p, _s in layout).items())),
        }
        for index, layout in sorted(node_layouts)
    ]


def config_name(node: str, node_layouts: Sequence[tuple[int, MigLayout]]) -> str:
    """``tessera-<node>-<12 hex>`` (a label value: at most 63 characters), from the node's layouts."""
    digest = hashlib.sha256(
        json.dumps([node, sorted((i, list(map(list, lay))) for i, lay in node_layouts)]).encode()
    ).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in node)[: 63 - 22].strip("-_.")
    return f"{CONFIG_PREFIX}{stem}-{digest}"


def config_errors(
    models: Mapping[int, str], node_layouts: Sequence[tuple[int, MigLayout]]
) -> list[str]:
    """Why a generated node config may not be written (``[]`` = it may): a card Tessera does not know the
    model of, a layout that is not valid for the card's model, a card listed twice."""
    errors = []
    seen: set[int] = set()
    for index, layout in node_layouts:
        if index in seen:
            errors.append(f"GPU {index} is listed twice")
        seen.add(index)
        model = models.get(index)
        if model is None:
            errors.append(f"GPU {index}: unknown card")
            continue
        errors.extend(f"GPU {index}: {e}" for e in layout_errors(model, layout))
    return errors


def with_config(document: Mapping[str, Any] | None, name: str, entries: list[JsonDict]) -> JsonDict:
    """The mig-parted spec with config `name` set to `entries`: the operator's configs are kept, and of
    Tessera's own only the newest `MAX_CONFIGS` (a label names at most one per node at a time)."""
    configs = dict((document or {}).get("mig-configs") or {})
    configs[name] = entries
    ours = [k for k in configs if k.startswith(CONFIG_PREFIX) and k != name]
    for stale in ours[: max(0, len(ours) - MAX_CONFIGS + 1)]:
        del configs[stale]
    return {"version": "v1", "mig-configs": configs}


def manager_status(labels: Mapping[str, str], name: str) -> MigLayoutStatus:
    """What the MIG manager says about config `name` on a node with `labels`."""
    if labels.get(MIG_CONFIG_LABEL) != name:
        return MigLayoutStatus(MigLayoutPhase.PENDING, f"the node is not labelled {name} yet")
    state = labels.get(MIG_CONFIG_STATE_LABEL, "")
    if state == "success":
        return MigLayoutStatus(MigLayoutPhase.READY)
    if state == "failed":
        return MigLayoutStatus(
            MigLayoutPhase.FAILED, f"NVIDIA's MIG manager reported {MIG_CONFIG_STATE_LABEL}=failed"
        )
    return MigLayoutStatus(
        MigLayoutPhase.PENDING, f"MIG manager state: {state or 'not reported yet'}"
    )
