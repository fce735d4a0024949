"""How a codespace is described to people: its size label, where to connect, when idle-stop happens
(why it waits and where it runs: `codespaces.phase.observe`). Pure functions of column values, so a model instance (`Codespace`'s properties) and a plain row
of the API's list query (`codespaces.api.rows`) say exactly the same thing."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from codespaces.choices import GpuMode
from core import units


def size_label(
    *,
    gpu_mode: str,
    gpu_count: int,
    gpu_milli: int,
    gpu_memory_mib: int,
    gpu_model: str,
    cpu_milli: int,
    memory_mib: int,
    mig_profile: str = "",
) -> str:
    """Human size: "25% · 20 GiB of 1 GPU · 2 CPU · 8 GiB RAM", "2 × whole GPU · ...", "CPU only · ..."."""
    cpu = f"{units.milli_to_cores(cpu_milli):g} CPU · {units.mib_to_gib(memory_mib):g} GiB RAM"
    model = f" {gpu_model}" if gpu_model else ""
    if gpu_mode == GpuMode.SLICE:
        gib = units.mib_to_gib(gpu_memory_mib)
        return f"{units.milli_to_percent(gpu_milli):g}% · {gib:g} GiB of 1{model} GPU · {cpu}"
    if gpu_mode == GpuMode.WHOLE:
        return f"{gpu_count} × whole{model} GPU · {cpu}"
    if gpu_mode == GpuMode.MIG:
        return f"MIG {mig_profile}{model} (hard isolation) · {cpu}"
    return f"CPU only · {cpu}"


def gpu_percent(gpu_mode: str, gpu_milli: int) -> float:
    """Compute share of a slice in percent of one card (0 for whole cards and CPU-only)."""
    return units.milli_to_percent(gpu_milli) if gpu_mode == GpuMode.SLICE else 0


def ide_url(name: str, username: str, tenant_slug: str) -> str:
    return settings.TESSERA_IDE_URL_PATTERN.format(name=name, user=username, tenant=tenant_slug)


def ssh_command(name: str, username: str, tenant_slug: str) -> str:
    return settings.TESSERA_SSH_COMMAND_PATTERN.format(name=name, user=username, tenant=tenant_slug)


def idle_stop_due_at(idle_warned_at: datetime | None, grace_minutes: int) -> datetime | None:
    """When an idle-warned codespace will be stopped unless someone keeps it."""
    if idle_warned_at is None:
        return None
    return idle_warned_at + timedelta(minutes=grace_minutes)
