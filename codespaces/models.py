"""Codespace templates (operator-managed), codespaces and their event timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from codespaces import display
from codespaces.choices import (
    ACTIVE_STATES,
    PLACED_STATES,
    STATE_BADGE,
    CodespaceState,
    DesiredState,
    EventKind,
    GpuMode,
)
from codespaces.phase import Observed, observe
from codespaces.placements import active_placements, workload_facts
from core.units import MILLI_PER_GPU
from portal.models import Tenant, dns_label_validator
from quotas.models import Quota
from scheduling.limits import MAX_GPU_MODEL_LENGTH

# Bounds of what operators may set on a template (form, API and model; the idle ones also in the
# database). A larger idle window is no policy: 9,999,999,999 minutes made every idle check overflow.
MAX_IDLE_MINUTES = 30 * 24 * 60
MAX_HOME_VOLUME_GIB = 1024 * 1024
MAX_CPU_MILLI = 10**7
MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB
MAX_PER_USER = 1000
MAX_WHOLE_CARD_MODELS = 32
MAX_PRESETS = 30
MAX_ALLOWED_TENANTS = 1000


def validate_gpu_model_names(value: object) -> None:
    """At most MAX_WHOLE_CARD_MODELS GPU model names, each a string of at most MAX_GPU_MODEL_LENGTH."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError('A list of GPU model names, e.g. ["T4"].')
    if len(value) > MAX_WHOLE_CARD_MODELS:
        raise ValidationError(f"At most {MAX_WHOLE_CARD_MODELS} GPU models (got {len(value)}).")
    long = [v for v in value if len(v) > MAX_GPU_MODEL_LENGTH]
    if long:
        raise ValidationError(
            f"A GPU model name has at most {MAX_GPU_MODEL_LENGTH} characters "
            f"(one has {len(long[0])})."
        )


class CodespaceTemplate(models.Model):
    """What operators offer developers: an image, size presets, the custom ranges a user may pick from,
    the home volume size, the idle policy and which tenants may use it (none selected = every tenant).

    `whole_card_models` lists GPU models that cannot be shared (a slice on them is refused);
    `allow_slices=False` makes the whole template whole-card only.
    """

    name = models.SlugField(max_length=63, unique=True, validators=[dns_label_validator])
    display_name = models.CharField(max_length=120)
    image = models.CharField(max_length=255)
    description = models.TextField(blank=True)
    home_volume_gib = models.PositiveIntegerField(
        default=50, validators=[MinValueValidator(1), MaxValueValidator(MAX_HOME_VOLUME_GIB)]
    )
    allow_custom = models.BooleanField(
        default=True, help_text="Users may pick their own size within the ranges below."
    )
    allow_slices = models.BooleanField(default=True)
    whole_card_models = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_gpu_model_names],
        help_text='GPU models that cannot be sliced, e.g. ["T4"]',
    )
    min_cpu_milli = models.PositiveIntegerField(
        default=500, validators=[MaxValueValidator(MAX_CPU_MILLI)]
    )
    max_cpu_milli = models.PositiveIntegerField(
        default=16000, validators=[MaxValueValidator(MAX_CPU_MILLI)]
    )
    min_memory_mib = models.PositiveIntegerField(
        default=1024, validators=[MaxValueValidator(MAX_MEMORY_MIB)]
    )
    max_memory_mib = models.PositiveIntegerField(
        default=131072, validators=[MaxValueValidator(MAX_MEMORY_MIB)]
    )
    max_gpu_count = models.PositiveSmallIntegerField(default=2, validators=[MaxValueValidator(16)])
    idle_window_minutes = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_IDLE_MINUTES)],
        help_text="Idle this long → warned (at most 30 days).",
    )
    idle_grace_minutes = models.PositiveIntegerField(
        default=15,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_IDLE_MINUTES)],
        help_text="After the warning, still idle this long → stopped (at most 30 days).",
    )
    idle_threshold_percent = models.PositiveSmallIntegerField(
        default=5,
        validators=[MaxValueValidator(100)],
        help_text="Mean GPU utilization below this counts as idle.",
    )
    max_per_user = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(MAX_PER_USER)]
    )
    allowed_tenants = models.ManyToManyField(
        Tenant, blank=True, related_name="codespace_templates", help_text="Empty = every tenant."
    )
    defrag_movable = models.BooleanField(
        default=True,
        help_text="Defragmentation may stop its codespaces and restart them elsewhere (home kept), "
        "when idle or with the owner's consent.",
    )
    active = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(idle_window_minutes__gte=1, idle_window_minutes__lte=MAX_IDLE_MINUTES),
                name="template_idle_window_1_minute_to_30_days",
            ),
            models.CheckConstraint(
                condition=Q(idle_grace_minutes__gte=1, idle_grace_minutes__lte=MAX_IDLE_MINUTES),
                name="template_idle_grace_1_minute_to_30_days",
            ),
        ]

    def __str__(self) -> str:
        return self.display_name or self.name


class TemplatePreset(models.Model):
    """A named size of a template: "1/4 H100: 25% compute, 20 GiB", "1 × A100 80GB", "CPU only"."""

    template = models.ForeignKey(
        CodespaceTemplate, on_delete=models.CASCADE, related_name="presets"
    )
    name = models.SlugField(max_length=63)
    label = models.CharField(max_length=120)
    gpu_mode = models.CharField(max_length=10, choices=GpuMode.choices, default=GpuMode.SLICE)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_percent = models.PositiveSmallIntegerField(default=0, help_text="Slice compute, 1-100 %")
    gpu_memory_gib = models.PositiveIntegerField(default=0, help_text="Slice GPU memory")
    gpu_model = models.CharField(
        max_length=63, blank=True, help_text="Preferred model; blank = any"
    )
    mig_profile = models.CharField(
        max_length=16, blank=True, default="", help_text="A MIG preset's profile, e.g. 1g.10gb"
    )
    cpu_milli = models.PositiveIntegerField(default=2000)
    memory_mib = models.PositiveIntegerField(default=8192)
    position = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["template", "position", "name"]
        constraints = [
            models.UniqueConstraint(fields=["template", "name"], name="uniq_preset_in_template")
        ]

    def __str__(self) -> str:
        return self.label


class Codespace(models.Model):
    """A developer environment: a container with a home volume, running as a scheduling Workload of kind
    "codespace" on a GPU slice, N whole cards or no GPU.

    `desired_state` is what the owner wants (running / stopped / deleted). What it *is* (`phase`), why
    it waits, where it runs and why it failed are never stored here: `observed` derives them from the
    desired state, the current scheduling `workload` (a new one per start) and its placement
    (`codespaces.phase.observe`); pages, the API and the auditor show that.

    `state` is a cache of `observed.phase`, kept as a column because the database needs it where
    `observe` cannot run: the unique live name (`uniq_live_codespace_name`), the (owner, state) and
    (tenant, state) indexes of the lists and per-user counts, the `?state=` filter and ordering, the
    reconciler's "every active codespace" and the compare-and-set that makes two concurrent actions
    conflict instead of both winning. It is written by one function, `codespaces.lifecycle.transition`
    (the timeline's cursor: each write records an event), and brought to `observe()` after every
    workload change by the follow-up (`codespaces.services.sync`); at rest it equals `phase`
    (codespaces/tests/test_state_cache.py, and the auditor's `codespace_state` invariant in
    production). The home volume survives stop/start and is removed on delete. `version` increments
    on every change (ETag).
    """

    name = models.CharField(max_length=63, validators=[dns_label_validator])
    # owner and tenant are indexed by the (owner, state) and (tenant, state) indexes below: a
    # single-column index on each would only slow every INSERT down
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="codespaces",
        db_index=False,
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, related_name="codespaces", db_index=False
    )
    quota = models.ForeignKey(Quota, on_delete=models.PROTECT, related_name="codespaces")
    template = models.ForeignKey(
        CodespaceTemplate, on_delete=models.PROTECT, related_name="codespaces"
    )
    preset = models.ForeignKey(
        TemplatePreset, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    image = models.CharField(max_length=255)
    gpu_mode = models.CharField(max_length=10, choices=GpuMode.choices)
    gpu_count = models.PositiveSmallIntegerField(default=0)
    gpu_milli = models.PositiveIntegerField(default=0, help_text="Per GPU; 1000 = whole card")
    gpu_memory_mib = models.PositiveIntegerField(default=0, help_text="Per GPU")
    gpu_model = models.CharField(max_length=63, blank=True)
    mig_profile = models.CharField(
        max_length=16, blank=True, default="", help_text="The MIG profile of a `mig` size (1g.10gb)"
    )
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    home_gib = models.PositiveIntegerField()
    desired_state = models.CharField(
        max_length=10, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    # a cache of `observed.phase` for the database's use (see the class docstring); written only by
    # `codespaces.lifecycle.transition`; its default is the phase of a new codespace (no workload yet)
    state = models.CharField(
        max_length=20, choices=CodespaceState.choices, default=CodespaceState.QUEUED
    )
    workload = models.ForeignKey(
        "scheduling.Workload",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="codespaces",
    )
    last_activity_at = models.DateTimeField(null=True, blank=True)
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_stopped_at = models.DateTimeField(null=True, blank=True)
    gpu_hours_freed = models.FloatField(default=0.0)
    move_consent = models.BooleanField(
        default=False,
        help_text="The owner agrees that defragmentation may restart it elsewhere while in use "
        "(home kept); without it, only an idle codespace is moved.",
    )
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    deleted_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=~Q(state=CodespaceState.DELETED),
                name="uniq_live_codespace_name",
            ),
            models.CheckConstraint(
                condition=Q(gpu_milli__lte=MILLI_PER_GPU), name="codespace_gpu_milli_at_most_1000"
            ),
        ]
        indexes = [
            models.Index(fields=["owner", "state"], name="codespace_owner_state"),
            models.Index(fields=["tenant", "state"], name="codespace_tenant_state"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def home_volume_name(self) -> str:
        """The home volume's cluster name: stable for the codespace's whole life (every workload it
        starts mounts the same volume), DNS-safe and unique (it carries the primary key)."""
        return f"cs-{self.name[:40].rstrip('-')}-{self.pk}-home"

    @property
    def phase(self) -> str:
        """What the codespace is now (`observed.phase`): the state pages and the API show."""
        return self.observed.phase

    @property
    def phase_label(self) -> str:
        """ "Running", "Queued", ...: the phase for people."""
        return str(CodespaceState(self.phase).label)

    @property
    def holds_placement(self) -> bool:
        return self.phase in PLACED_STATES

    @property
    def badge(self) -> str:
        return STATE_BADGE.get(CodespaceState(self.phase), "")

    @property
    def uses_gpu(self) -> bool:
        return self.gpu_mode != GpuMode.NONE

    @property
    def gpu_fraction(self) -> float:
        """Cards' worth of GPU compute held when placed (0.25 for a 25% slice, 2.0 for two cards)."""
        if self.gpu_mode == GpuMode.NONE:
            return 0.0
        return self.gpu_count * self.gpu_milli / MILLI_PER_GPU

    @property
    def whole_cards_without_slicing(self) -> int:
        """Cards this codespace would hold if GPUs could not be shared."""
        return self.gpu_count if self.gpu_mode != GpuMode.NONE else 0

    @property
    def size_label(self) -> str:
        """Human size: "25% · 20 GiB of 1 GPU", "2 × whole GPU", "CPU only"."""
        return display.size_label(
            gpu_mode=self.gpu_mode,
            gpu_count=self.gpu_count,
            gpu_milli=self.gpu_milli,
            gpu_memory_mib=self.gpu_memory_mib,
            gpu_model=self.gpu_model,
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            mig_profile=self.mig_profile,
        )

    @property
    def observed(self) -> Observed:
        """The codespace as it is now, derived from its desired state, its workload and the workload's
        placement (`codespaces.phase.observe`); read once per instance (`forget_observed` after a
        change; lists attach their placements in one query with `attach_placements`)."""
        cached: Observed | None = self.__dict__.get("_observed")
        if cached is None:
            workload = self.workload if self.workload_id is not None else None
            if "_placement" in self.__dict__:
                placement = self.__dict__["_placement"]
            elif workload is not None and workload.state in ("placed", "running"):
                placement = active_placements([self.workload_id]).get(self.workload_id or 0)
            else:
                placement = None
            cached = observe(self.desired_state, workload_facts(workload), placement)
            self.__dict__["_observed"] = cached
        return cached

    def forget_observed(self) -> None:
        """Drop what `observed` read (the workload or its placement changed)."""
        self.__dict__.pop("_observed", None)
        self.__dict__.pop("_placement", None)

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        self.forget_observed()
        super().refresh_from_db(*args, **kwargs)

    @property
    def waiting_reason(self) -> str:
        """Why a queued codespace waits, fresh from its workload (the cycle updates it every pass)."""
        return self.observed.pending_reason

    @property
    def waiting_position(self) -> int | None:
        """Its position in the queue of its pool, fresh from its workload."""
        return self.observed.queue_position

    @property
    def pending_code(self) -> str:
        return self.observed.pending_code

    @property
    def failure_reason(self) -> str:
        """Why it failed, from its workload ("" unless failed)."""
        return self.observed.failure_reason

    @property
    def node_name(self) -> str:
        return self.observed.node_name

    @property
    def gpu_names(self) -> str:
        """e.g. "gpu0, gpu1" while placed."""
        return self.observed.gpu_names

    @property
    def gpu_model_placed(self) -> str:
        return self.observed.gpu_model_placed

    @property
    def location(self) -> str:
        """ "node-3 / gpu1" once placed, else ""."""
        return self.observed.location

    def ide_url(self) -> str:
        return display.ide_url(self.name, self.owner.get_username(), self.tenant.slug)

    def ssh_command(self) -> str:
        return display.ssh_command(self.name, self.owner.get_username(), self.tenant.slug)

    def idle_stop_due_at(self) -> datetime | None:
        """When an idle-warned codespace will be stopped unless someone keeps it."""
        if self.idle_warned_at is None:
            return None
        return display.idle_stop_due_at(self.idle_warned_at, self.template.idle_grace_minutes)


def attach_placements(codespaces: list[Codespace]) -> list[Codespace]:
    """Read the active placements of `codespaces`' workloads in one query and attach them, so that
    `observed` on each (a list page's location column) reads nothing more. Returns the list."""
    placements = active_placements(c.workload_id for c in codespaces)
    for codespace in codespaces:
        codespace.forget_observed()
        codespace.__dict__["_placement"] = placements.get(codespace.workload_id or 0)
    return codespaces


class CodespaceEvent(models.Model):
    """One entry of a codespace's timeline: a state change, a pending reason, an idle warning, ..."""

    codespace = models.ForeignKey(Codespace, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    from_state = models.CharField(max_length=20, choices=CodespaceState.choices, blank=True)
    to_state = models.CharField(max_length=20, choices=CodespaceState.choices, blank=True)
    message = models.TextField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.codespace}: {self.kind} {self.message[:60]}"
