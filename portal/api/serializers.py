from __future__ import annotations

import copy
from typing import Any

from rest_framework import serializers

from portal.models import ApiToken, Membership, OperatorAction, Tenant

_NESTED = (serializers.BaseSerializer, serializers.ListField, serializers.DictField)


class InputSerializer(serializers.Serializer):
    """A request-body serializer that copies its declared fields shallowly per instance.

    DRF deep-copies every declared field (validators, choices, defaults) for every serializer
    instance; on a codespace submit that was the largest cost DRF added. A field's per-instance state
    is what `bind()` sets on the copy, so a shallow copy is enough for flat fields; nested serializers
    and list/dict fields (whose child is bound to its parent) are still deep-copied."""

    def get_fields(self) -> dict[str, Any]:
        declared: dict[str, Any] = self._declared_fields  # type: ignore[attr-defined]
        return {
            name: copy.deepcopy(field) if isinstance(field, _NESTED) else copy.copy(field)
            for name, field in declared.items()
        }


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["id", "slug", "name", "created_at"]


class MembershipSerializer(serializers.ModelSerializer):
    tenant = TenantSerializer(read_only=True)

    class Meta:
        model = Membership
        fields = ["tenant", "role"]


class ApiTokenSerializer(serializers.ModelSerializer):
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "is_active",
        ]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text=(
            "Left out: TESSERA_TOKEN_DEFAULT_DAYS from now. At most TESSERA_TOKEN_MAX_DAYS from now, "
            "and null (never expires), for operators only. A token minted with a token expires no "
            "later than it."
        ),
    )


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(
        read_only=True, help_text="The raw token. Shown once; store it now."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "token"]
        read_only_fields = fields


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    is_operator = serializers.BooleanField()
    memberships = MembershipSerializer(many=True)


class OperatorActionSerializer(serializers.ModelSerializer):
    """One entry of the operators' audit trail."""

    actor = serializers.CharField(source="actor_name")
    workloads = serializers.SerializerMethodField()

    class Meta:
        model = OperatorAction
        fields = (
            "id", "created_at", "actor", "action", "target_kind", "target_id", "target_name",
            "node_name", "reason", "summary", "impact", "workloads",
        )  # fmt: skip
        read_only_fields = fields

    def get_workloads(self, entry: OperatorAction) -> list[int]:
        return list(entry.impact.get("workloads", []))
