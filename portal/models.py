"""Tenancy (teams and their members) and personal API tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from portal.choices import MembershipRole, OperatorActionKind, OperatorTargetKind

TOKEN_PREFIX = "tsr_"
dns_label_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    "Use lowercase letters, digits and '-', starting and ending with a letter or digit (max 63).",
)


class Tenant(models.Model):
    """A team that owns quotas, codespaces and jobs. Every tenant-owned object is scoped through
    `portal.scoping`."""

    slug = models.SlugField(max_length=63, unique=True, validators=[dns_label_validator])
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's membership of a tenant, with a role (`member` or `tenant_admin`)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(
        max_length=20, choices=MembershipRole.choices, default=MembershipRole.MEMBER
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="uniq_membership")]
        ordering = ["tenant__slug", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self) -> ApiTokenQuerySet:
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the raw value is shown once at creation.

    Format: `tsr_<8-char lookup prefix>_<secret>`; the prefix finds the row, the hash proves the secret.
    `parent`: the token the request that created this one authenticated with (None when created from
    a browser session or the admin); revoking a token revokes every token minted through it.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=8, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="minted"
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({TOKEN_PREFIX}{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @staticmethod
    def generate() -> tuple[str, str, str]:
        """Return (raw token, prefix, hash)."""
        prefix = secrets.token_hex(4)
        raw = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
        return raw, prefix, hash_token(raw)


class IdempotencyRecord(models.Model):
    """The first response to a POST sent with an `Idempotency-Key` (portal.api.idempotency).

    Written in the same transaction as the view's own writes, under the key's advisory lock (so of N
    concurrent duplicates exactly one executes; the others answer 409 until it commits): its status,
    headers and body, which every retry within the TTL gets back verbatim. New rows are `completed`;
    `in_progress` rows are claims an earlier version left, taken over when met.
    `fingerprint` is the SHA-256 of the canonical request body: the same key with another body is refused.
    """

    STATE_IN_PROGRESS = "in_progress"
    STATE_COMPLETED = "completed"

    scope = models.CharField(max_length=80, help_text="'token:<sha256>' or 'user:<id>'")
    method = models.CharField(max_length=10)
    path = models.CharField(max_length=500)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    state = models.CharField(max_length=20, default=STATE_IN_PROGRESS)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_headers = models.JSONField(default=dict, blank=True)
    response_body = models.BinaryField(default=b"", blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "method", "path", "key"], name="uniq_idempotency_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} key={self.key} ({self.state})"


class RateLimitCounter(models.Model):
    """Requests counted in one fixed window for one bucket ('token:<id>', 'user:<id>', 'tenant:<id>').

    Incremented with one atomic upsert (`INSERT ... ON CONFLICT DO UPDATE SET count = count + 1
    RETURNING count`), so concurrent requests never lose a count (portal.api.ratelimit).
    """

    bucket = models.CharField(max_length=80)
    window_start = models.BigIntegerField(help_text="Unix time of the window's start")
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["bucket", "window_start"], name="uniq_ratelimit_window")
        ]
        indexes = [models.Index(fields=["window_start"], name="ratelimit_window_start")]

    def __str__(self) -> str:
        return f"{self.bucket}@{self.window_start}: {self.count}"


class PeriodClaim(models.Model):
    """One run of a periodic task for one period (portal.periodic.claim_period): the row is inserted in
    the run's transaction, so a second run of the same period (beat re-sent the task after a restart,
    a duplicate delivery) finds it and skips, while a run that failed rolled its claim back with its
    work. Rows older than `portal.periodic.CLAIM_RETENTION` are pruned by the next claim of the task."""

    task_name = models.CharField(max_length=200)
    period_start = models.DateTimeField()
    claimed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task_name", "period_start"], name="uniq_period_claim")
        ]

    def __str__(self) -> str:
        return f"{self.task_name} @ {self.period_start.isoformat()}"


class SweepRun(models.Model):
    """The latest run of one periodic sweep (a beat task that looks at the current state, portal.periodic
    `claim_sweep`): when it started, and which message (sent when) started it. A queued copy sent before that start
    is covered by that run and skipped, so a worker that fell behind drains its backlog in milliseconds
    instead of repeating the same sweep once per queued copy."""

    name = models.CharField(max_length=200, unique=True)
    started_at = models.DateTimeField()
    sent_at = models.DateTimeField(help_text="When beat sent the copy that started it.")
    task_id = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.name} @ {self.started_at.isoformat()}"


class OidcIdentity(models.Model):
    """The single sign-on identity a user logs in with: the provider's issuer and its stable subject
    (`sub`) for that person (portal.sso). A user found by this pair is the same person even when the
    provider's username or e-mail changes; a new pair never takes over an existing local account."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)
    # when the provider last confirmed the person's groups (an SSO login); operator rights derived
    # from them lapse TESSERA_SSO_ROLE_MAX_AGE_SECONDS later (portal.sso.roles)
    roles_confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="uniq_oidc_identity")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer} ({self.user})"


class OperatorAction(models.Model):
    """One operator action (cordon, drain, GPU health, simulated failure, token revoke, delete): who did
    it, when, why, and what it affected (`summary`: the sentence its confirmation showed; `impact`:
    the counts and names behind it). Written by the action's service in the action's transaction, so
    an action that did not happen leaves no row. Read by the activity log, the node page and the
    timelines of the codespaces and jobs it moved."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept as text too: the log still says who after the account is deleted.
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=32, choices=OperatorActionKind.choices, db_index=True)
    target_kind = models.CharField(max_length=20, choices=OperatorTargetKind.choices)
    target_id = models.PositiveBigIntegerField(null=True, blank=True)
    target_name = models.CharField(max_length=255)
    # The node of a node or GPU action (its page lists them); "" for the others.
    node_name = models.CharField(max_length=253, blank=True, db_index=True)
    reason = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    impact = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor_name or 'system'}: {self.action} {self.target_name}"


class OperatorActionWorkload(models.Model):
    """A workload an operator action requeued (by id: the portal app sits below scheduling), so a
    codespace's or job's timeline can say which operator moved it and why."""

    operator_action = models.ForeignKey(
        OperatorAction, on_delete=models.CASCADE, related_name="workloads"
    )
    workload_id = models.PositiveBigIntegerField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["operator_action", "workload_id"], name="operator_action_workload_once"
            )
        ]
