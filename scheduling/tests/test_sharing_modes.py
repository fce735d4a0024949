"""A pool's sharing mode decides what a workload may ask for there (quotas.sharing, checked at submit)."""

from __future__ import annotations

from typing import Any

import pytest

from portal.errors import InvalidInput
from quotas import services as quota_services
from scheduling import services
from scheduling.models import Workload
from scheduling.tests.factories import make_quota

pytestmark = pytest.mark.django_db


def _submit(quota: Any, name: str, **gpu: Any) -> Workload:
    return services.submit_workload(
        tenant=quota.tenant,
        quota=quota,
        kind="job_pod",
        name=name,
        cpu_milli=1000,
        memory_mib=1024,
        **gpu,
    )


def test_exclusive_pool_refuses_a_slice_and_takes_a_whole_gpu() -> None:
    group = quota_services.create_group(name="training", sharing_mode="exclusive").obj
    quota = make_quota(group)
    with pytest.raises(InvalidInput) as info:
        _submit(quota, "slice", gpu_count=1, gpu_milli=250)
    assert info.value.fields == {"gpu_milli": ["This pool hands out whole GPUs only."]}
    assert not Workload.objects.exists()
    assert _submit(quota, "whole", gpu_count=1, gpu_milli=1000).gpu_milli == 1000


def test_time_sliced_pool_takes_exactly_one_replica() -> None:
    group = quota_services.create_group(
        name="dev", sharing_mode="timeslice", timeslice_replicas=4
    ).obj
    quota = make_quota(group)
    assert _submit(quota, "replica", gpu_count=1, gpu_milli=250).gpu_milli == 250
    with pytest.raises(InvalidInput) as info:
        _submit(quota, "half", gpu_count=1, gpu_milli=500)
    assert list(info.value.fields) == ["gpu_milli"]
    assert _submit(quota, "cpu-only").gpu_count == 0


def test_slice_pool_keeps_todays_behaviour() -> None:
    group = quota_services.create_group(name="shared").obj
    quota = make_quota(group)
    assert _submit(quota, "slice", gpu_count=1, gpu_milli=300, gpu_memory_mib=4096).gpu_milli == 300


def test_a_slice_without_gpu_memory_is_refused_naming_the_field() -> None:
    # issue 38: a slice is isolated by its memory limit; 0 MiB used to be accepted
    group = quota_services.create_group(name="shared").obj
    quota = make_quota(group)
    with pytest.raises(InvalidInput) as info:
        _submit(quota, "slice", gpu_count=1, gpu_milli=300, gpu_memory_mib=0)
    assert info.value.fields == {
        "gpu_memory_mib": ["A slice of a GPU needs some of its memory (at least 1 MiB)."]
    }
    assert not Workload.objects.exists()
    assert _submit(quota, "whole", gpu_count=1, gpu_milli=1000).gpu_memory_mib == 0
