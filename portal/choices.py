from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"


class OperatorActionKind(models.TextChoices):
    """What an operator did (portal.OperatorAction.action). Deletes of quotas and groups keep their own
    history (quotas.QuotaChange)."""

    CORDON = "cordon", "Cordon node"
    UNCORDON = "uncordon", "Uncordon node"
    DRAIN = "drain", "Drain node"
    NODE_FAILURE = "node_failure", "Simulate node failure"
    GPU_UNHEALTHY = "gpu_unhealthy", "Mark GPU unhealthy"
    GPU_HEALTHY = "gpu_healthy", "Mark GPU healthy"
    GPU_FAILURE = "gpu_failure", "Simulate GPU failure"
    TOKEN_REVOKE = "token_revoke", "Revoke API token"
    BUDGET_TOP_UP = "budget_top_up", "Top up a GPU-hour budget"
    LOAN_APPROVE = "loan_approve", "Approve a quota loan"
    LOAN_DECLINE = "loan_decline", "Decline a quota loan"


class OperatorTargetKind(models.TextChoices):
    """What an operator action was done to."""

    NODE = "node", "Node"
    GPU = "gpu", "GPU"
    TOKEN = "token", "API token"
    QUOTA = "quota", "Quota"
