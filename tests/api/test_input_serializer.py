"""`InputSerializer` copies declared fields shallowly: each instance still has its own bound fields and
validates exactly as a DRF serializer that deep-copies them."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.serializers import InputSerializer


class Member(serializers.Serializer):
    cpu = serializers.IntegerField(min_value=1)


class Fast(InputSerializer):
    name = serializers.CharField(max_length=5)
    mode = serializers.ChoiceField(choices=["a", "b"], default="a")
    tags = serializers.ListField(child=serializers.CharField(max_length=3), required=False)
    member = Member(required=False)


class Plain(serializers.Serializer):
    name = serializers.CharField(max_length=5)
    mode = serializers.ChoiceField(choices=["a", "b"], default="a")
    tags = serializers.ListField(child=serializers.CharField(max_length=3), required=False)
    member = Member(required=False)


CASES = [
    {"name": "ok"},
    {"name": "too-long", "mode": "c"},
    {"name": "x", "tags": ["abcd", "ab"], "member": {"cpu": 0}},
    {"name": "y", "tags": ["ab"], "member": {"cpu": 2}, "mode": "b"},
    {},
]


def test_validates_exactly_like_a_deep_copying_serializer() -> None:
    for data in CASES:
        fast, plain = Fast(data=data), Plain(data=data)
        assert fast.is_valid() == plain.is_valid(), data
        assert fast.errors == plain.errors, data
        if plain.is_valid():
            assert fast.validated_data == plain.validated_data


def test_each_instance_binds_its_own_fields() -> None:
    first, second = Fast(data={"name": "a"}), Fast(data={"name": "b"})
    for name in ("name", "mode", "tags", "member"):
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first
        assert second.fields[name].parent is second
    assert first.fields["tags"].child is not second.fields["tags"].child
