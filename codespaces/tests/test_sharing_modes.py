"""The codespace picker offers only what the pool's sharing mode supports (quotas.sharing)."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces import services
from portal.errors import InvalidInput
from quotas.models import QuotaGroup

pytestmark = pytest.mark.django_db


def _set_mode(group: QuotaGroup, **fields: Any) -> None:
    QuotaGroup.objects.filter(pk=group.pk).update(**fields)
    group.refresh_from_db()


def test_exclusive_pool_refuses_the_slice_preset_and_keeps_whole_cards(
    quota_a: Any, template: Any
) -> None:
    _set_mode(quota_a.group, sharing_mode="exclusive")
    by_name = {o.preset.name: o for o in services.picker_data(template, quota_a).options}
    assert (
        by_name["quarter-h100"].refused
        == "gpu_percent: Pool gpu: This pool hands out whole GPUs only."
    )
    assert by_name["quarter-h100"].starts_now is False
    assert by_name["t4"].starts_now is True
    assert by_name["cpu"].starts_now is True


def test_time_sliced_pool_takes_one_replica_size_only(quota_a: Any, template: Any) -> None:
    _set_mode(quota_a.group, sharing_mode="timeslice", timeslice_replicas=4)
    quarter = services.SizeRequest(
        gpu_mode="slice", gpu_percent=25, gpu_memory_gib=20, gpu_model="H100"
    )
    assert services.validate_size(template, quota_a, quarter).gpu_milli == 250
    half = services.SizeRequest(
        gpu_mode="slice", gpu_percent=50, gpu_memory_gib=20, gpu_model="H100"
    )
    with pytest.raises(InvalidInput) as info:
        services.validate_size(template, quota_a, half)
    assert list(info.value.fields) == ["gpu_percent"]
    assert "4 replicas" in info.value.fields["gpu_percent"][0]
