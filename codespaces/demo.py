"""Demo codespace templates matching the simulated demo cluster (idempotent).

Pool `training`: H100 80 GB and A100 40/80 GB nodes; pool `interactive`: L40S 45 GB and T4 15 GB nodes.
T4s are too small to share usefully, so they are whole-card only.
"""

from __future__ import annotations

from typing import Any, TextIO

from django.contrib.auth import get_user_model

from codespaces.models import Codespace, CodespaceTemplate, TemplatePreset
from portal.models import Tenant

TEMPLATES: list[dict[str, Any]] = [
    {
        "name": "pytorch",
        "display_name": "PyTorch (CUDA 12)",
        "image": "ghcr.io/tessera/codespace-pytorch:2.4-cuda12",
        "description": "VS Code in the browser with PyTorch, CUDA 12 and Jupyter. For model development "
        "on a slice of an H100 or A100; whole cards for multi-GPU work.",
        "home_volume_gib": 100,
        "whole_card_models": ["T4"],
        "max_gpu_count": 4,
        "max_cpu_milli": 32000,
        "max_memory_mib": 262144,
        "idle_window_minutes": 60,
        "idle_grace_minutes": 15,
        "idle_threshold_percent": 5,
        "max_per_user": 3,
        "presets": [
            (
                "quarter-h100",
                "1/4 H100: 25% compute, 20 GiB",
                "slice",
                1,
                25,
                20,
                "H100",
                8000,
                32768,
            ),
            ("half-a100", "1/2 A100: 50% compute, 20 GiB", "slice", 1, 50, 20, "A100", 8000, 32768),
            ("a100", "1 × A100 (whole card)", "whole", 1, 100, 0, "A100", 16000, 65536),
            ("2x-h100", "2 × H100 NVLink", "whole", 2, 100, 0, "H100", 32000, 131072),
            ("cpu", "CPU only", "none", 0, 0, 0, "", 4000, 16384),
        ],
    },
    {
        "name": "notebook",
        "display_name": "Jupyter notebook",
        "image": "ghcr.io/tessera/codespace-jupyter:4.2",
        "description": "JupyterLab for data exploration and inference experiments on L40S slices "
        "or a whole T4.",
        "home_volume_gib": 50,
        "whole_card_models": ["T4"],
        "max_gpu_count": 1,
        "max_cpu_milli": 16000,
        "max_memory_mib": 65536,
        "idle_window_minutes": 30,
        "idle_grace_minutes": 10,
        "idle_threshold_percent": 5,
        "max_per_user": 2,
        "presets": [
            (
                "quarter-l40s",
                "1/4 L40S: 25% compute, 11 GiB",
                "slice",
                1,
                25,
                11,
                "L40S",
                4000,
                16384,
            ),
            ("t4", "1 × T4 (whole card)", "whole", 1, 100, 0, "T4", 4000, 16384),
            ("cpu", "CPU only", "none", 0, 0, 0, "", 2000, 8192),
        ],
    },
]


# A few developer environments so a fresh demo shows slices on the cluster page and savings on the
# dashboards: (owner, tenant, template, preset, name)
CODESPACES = [
    ("bob", "ml-research", "pytorch", "quarter-h100", "bob-llm-finetune"),
    ("bob", "ml-research", "notebook", "quarter-l40s", "bob-eda"),
    ("alice", "ml-research", "pytorch", "quarter-h100", "alice-rlhf"),
    ("carol", "vision", "pytorch", "half-a100", "carol-vit"),
    ("carol", "vision", "notebook", "quarter-l40s", "carol-labels"),
    ("dave", "inference", "notebook", "quarter-l40s", "dave-serving"),
    ("dave", "inference", "pytorch", "quarter-h100", "dave-quantize"),
]


def seed(stdout: TextIO) -> None:
    seed_templates(stdout)
    seed_codespaces(stdout)


def seed_codespaces(stdout: TextIO) -> None:
    """Create the demo codespaces that do not exist yet, through the normal service (queued, placed)."""
    from codespaces.services import create_codespace

    users = {
        u.username: u
        for u in get_user_model().objects.filter(username__in={c[0] for c in CODESPACES})
    }
    created = 0
    for owner, tenant_slug, template, preset, name in CODESPACES:
        tenant = Tenant.objects.filter(slug=tenant_slug).first()
        if owner not in users or tenant is None or Codespace.objects.filter(name=name).exists():
            continue
        create_codespace(
            user=users[owner], tenant=tenant, template=template, name=name, preset=preset
        )
        created += 1
    stdout.write(f"Demo codespaces: {created} created, {Codespace.objects.count()} in total\n")


def seed_templates(stdout: TextIO) -> None:
    for spec in TEMPLATES:
        spec = dict(spec)
        presets = spec.pop("presets")
        template, created = CodespaceTemplate.objects.get_or_create(
            name=spec["name"], defaults=spec
        )
        for position, (name, label, mode, count, percent, gib, model, cpu, memory) in enumerate(
            presets
        ):
            TemplatePreset.objects.get_or_create(
                template=template,
                name=name,
                defaults={
                    "label": label,
                    "gpu_mode": mode,
                    "gpu_count": count,
                    "gpu_percent": percent if mode == "slice" else 0,
                    "gpu_memory_gib": gib,
                    "gpu_model": model,
                    "cpu_milli": cpu,
                    "memory_mib": memory,
                    "position": position,
                },
            )
        stdout.write(
            f"Codespace template {template.name}: {template.presets.count()} sizes"
            f"{' (new)' if created else ''}\n"
        )
