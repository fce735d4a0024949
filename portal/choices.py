from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"


class OperatorActionKind(models.TextChoices):
    """What an operator did (portal.OperatorAction.action). Deletes of quotas and groups are also kept in
    their own history (quotas.QuotaChange)."""

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

    QUOTA_DELETE = "quota_delete", "Delete quota"
    QUOTA_GROUP_DELETE = "quota_group_delete", "Delete quota group"
    TEMPLATE_RETIRE = "template_retire", "Delete (retire) codespace template"
    CODESPACE_DELETE = "codespace_delete", "Delete another user's codespace"


class OperatorTargetKind(models.TextChoices):
    """What an operator action was done to."""

    NODE = "node", "Node"
    GPU = "gpu", "GPU"
    TOKEN = "token", "API token"
    QUOTA = "quota", "Quota"
    QUOTA_GROUP = "quota_group", "Quota group"
    TEMPLATE = "template", "Codespace template"
    CODESPACE = "codespace", "Codespace"
