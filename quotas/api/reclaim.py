"""API bodies of polite reclaim: the reclaim plan of a quota (its notices), a group's notice, a quota's
checkpoint webhook and equal share of borrowing (quotas.reclaim_notices)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from quotas.models import MAX_RECLAIM_NOTICE_SECONDS, DeliveryState, Quota, ReclaimNoticeState
from quotas.reclaim_notices import notice_json, notices_for_quota

MAX_NOTICES_LISTED = 200


class ReclaimNoticeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=ReclaimNoticeState.choices)
    group = serializers.CharField()
    quota = serializers.CharField(help_text="The quota whose borrowed work is reclaimed.")
    quota_id = serializers.IntegerField()
    claimant_quota = serializers.CharField(allow_null=True, help_text="The quota it goes back to.")
    claimant_quota_id = serializers.IntegerField(allow_null=True)
    workload_id = serializers.IntegerField()
    workload = serializers.CharField()
    kind = serializers.CharField()
    owner = serializers.CharField()
    reason = serializers.CharField()
    noticed_at = serializers.DateTimeField()
    deadline = serializers.DateTimeField(help_text="When it is stopped unless cancelled first.")
    seconds_left = serializers.IntegerField(allow_null=True)
    closed_at = serializers.DateTimeField(allow_null=True)
    close_note = serializers.CharField()
    signal_state = serializers.ChoiceField(choices=DeliveryState.choices)
    hook_state = serializers.ChoiceField(choices=DeliveryState.choices)
    hook_detail = serializers.CharField()


class ReclaimNoticeSettingSerializer(serializers.Serializer):
    reclaim_notice_seconds = serializers.IntegerField(
        min_value=0,
        max_value=MAX_RECLAIM_NOTICE_SECONDS,
        help_text="Seconds of notice borrowed work gets before it is stopped (0 = at once).",
    )


class ReclaimSettingsSerializer(serializers.Serializer):
    checkpoint_webhook_url = serializers.URLField(
        required=False,
        allow_blank=True,
        max_length=500,
        help_text="POSTed, HMAC-signed, when the team's work gets a reclaim notice (empty = none).",
    )
    equal_borrowing_share = serializers.BooleanField(
        required=False,
        help_text="Cap each active user's borrowed GPUs at the team's borrowing ÷ its active users.",
    )


def reclaim_notices_body(quota: Quota, *, state: str = "") -> list[dict[str, Any]]:
    """The body of GET /api/v1/quotas/{id}/reclaim-notices/: newest first, live ones first."""
    now = timezone.now()
    rows = notices_for_quota(quota)
    if state:
        rows = rows.filter(state=state)
    notices = sorted(
        rows[:MAX_NOTICES_LISTED],
        key=lambda n: (n.state != ReclaimNoticeState.NOTICED, -n.noticed_at.timestamp(), -n.pk),
    )
    return [notice_json(n, now) for n in notices]
