from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.forms import AdminUserCreationForm, UserChangeForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from portal.models import ApiToken, Membership, OidcIdentity, OperatorAction, PeriodClaim, Tenant
from portal.services import revoke_token
from portal.usernames import check_new_username


class _UsernameRule:
    """The admin's user forms apply the one username rule (portal.usernames) on add and rename."""

    instance: Any
    cleaned_data: dict[str, Any]

    def clean_username(self) -> str:
        inherited = getattr(
            super(), "clean_username", None
        )  # UserCreationForm's (unique, any case)
        username = inherited() if inherited is not None else self.cleaned_data["username"]
        try:
            return check_new_username(username, user_pk=self.instance.pk)
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["username"]) from exc


class TesseraUserCreationForm(_UsernameRule, AdminUserCreationForm):
    pass


class TesseraUserChangeForm(_UsernameRule, UserChangeForm):
    pass


admin.site.unregister(User)


@admin.register(User)
class TesseraUserAdmin(UserAdmin):
    """Django's user admin, with the one username rule on its add and change forms."""

    add_form = TesseraUserCreationForm
    form = TesseraUserChangeForm


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username", "tenant__slug")
    list_select_related = ("user", "tenant")
    raw_id_fields = ("user", "tenant")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Operators can see and revoke tokens; the secret is never stored, so never shown."""

    list_display = (
        "name",
        "user",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("revoked_at",)
    search_fields = ("name", "user__username", "prefix")
    list_select_related = ("user",)
    # revoked_at only through the action: revoking goes through the service, which revokes the
    # tokens minted through the token too and writes the audit row
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at", "revoked_at", "parent")
    raw_id_fields = ("user",)
    actions = ["revoke_selected"]

    @admin.action(description="Revoke the selected tokens and the tokens minted through them")
    def revoke_selected(self, request: Any, queryset: Any) -> None:
        for token in queryset.select_related("user"):
            revoke_token(token.user, token.pk, actor=request.user)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(PeriodClaim)
class PeriodClaimAdmin(admin.ModelAdmin):
    """Which periodic task ran for which period (written by the tasks; read-only here)."""

    list_display = ("task_name", "period_start", "claimed_at")
    list_filter = ("task_name",)
    readonly_fields = ("task_name", "period_start", "claimed_at")
    show_full_result_count = False

    def has_add_permission(self, request: Any) -> bool:
        return False


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    """Which account a single sign-on subject logs in as (written at SSO login). Deleting a row
    unlinks the account: the next login with that subject makes a new one, or is refused if the
    username is taken."""

    list_display = ("user", "issuer", "subject", "created_at", "last_login_at")
    search_fields = ("user__username", "subject")
    list_select_related = ("user",)
    readonly_fields = ("user", "issuer", "subject", "created_at", "last_login_at")
    show_full_result_count = False

    def has_add_permission(self, request: Any) -> bool:
        return False


@admin.register(OperatorAction)
class OperatorActionAdmin(admin.ModelAdmin):
    """The audit trail, read only: rows are written by the actions' services, never edited."""

    list_display = ("created_at", "actor_name", "action", "target_name", "reason")
    list_filter = ("action", "target_kind")
    search_fields = ("actor_name", "target_name", "node_name", "reason")
    list_select_related = ("actor",)
    show_full_result_count = False

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
