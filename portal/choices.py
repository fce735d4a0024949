from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    TENANT_ADMIN = "tenant_admin", "Tenant admin"
