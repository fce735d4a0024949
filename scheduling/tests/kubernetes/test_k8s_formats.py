"""HAMi and Koordinator wire formats, quantities, and error classification."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from k8s_builders import GPU_A, GPU_B, hami_register_json

from scheduling.backends.base import BackendError, GpuBinding
from scheduling.backends.kubernetes.hami import (
    HamiDevice,
    encode_container_devices,
    format_node_lock,
    gpu_cores_percent,
    parse_node_lock,
    parse_node_register,
)
from scheduling.backends.kubernetes.interface import (
    ClusterApiError,
    WatchExpired,
    is_transient_status,
)
from scheduling.backends.kubernetes.quantity import (
    bytes_to_mib,
    cpu_milli,
    format_mib,
    parse_quantity,
)


def test_encode_devices_matches_spec_example():
    gpu = GpuBinding(index=0, uuid=GPU_A, gpu_milli=300, gpu_memory_mib=12288)

    assert encode_container_devices([gpu]) == f"{GPU_A},NVIDIA,12288,30:;"


@pytest.mark.parametrize(
    ("_case", "milli", "percent"),
    [("whole", 1000, 100), ("thirty", 300, 30), ("tiny", 4, 1), ("odd", 333, 33)],
)
def test_gpu_cores_percent(_case, milli, percent):
    assert gpu_cores_percent(milli) == percent


def test_node_lock_round_trip_and_expiry():
    taken = datetime(2026, 1, 1, tzinfo=UTC)
    value = format_node_lock(taken, "team-a", "cs-alice-7f3k")
    lock = parse_node_lock(value)

    assert value == "2026-01-01T00:00:00Z,team-a,cs-alice-7f3k"
    assert lock.taken_at == taken
    assert lock.is_owned_by("team-a", "cs-alice-7f3k")
    assert not lock.is_owned_by("team-a", "other")
    assert not lock.is_expired(datetime(2026, 1, 1, 0, 5, tzinfo=UTC), 300)
    assert lock.is_expired(datetime(2026, 1, 1, 0, 5, 1, tzinfo=UTC), 300)


def test_unreadable_lock_time_counts_as_expired():
    lock = parse_node_lock("garbage,ns,pod")

    assert lock.taken_at is None
    assert lock.is_expired(datetime(2026, 1, 1, tzinfo=UTC), 300)


def test_register_json_format_with_omitted_keys_defaults_to_zero_and_false():
    value = '[{"id":"GPU-x","count":10,"devmem":81920,"devcore":100,"type":"NVIDIA-A10"}]'

    assert parse_node_register(value) == [
        HamiDevice("GPU-x", 0, 10, 81920, 100, "NVIDIA-A10", 0, "hami-core", False)
    ]


def test_register_json_format_full():
    devices = parse_node_register(hami_register_json(GPU_A, GPU_B))

    assert [(d.uuid, d.index, d.memory_mib, d.numa, d.healthy) for d in devices] == [
        (GPU_A, 0, 81920, 0, True),
        (GPU_B, 1, 81920, 1, True),
    ]


def test_register_colon_format_nine_and_seven_fields():
    nine = "GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,3,hami-core:"
    seven = "GPU-a,10,16384,100,NVIDIA-T4,1,false:GPU-b,10,16384,100,NVIDIA-T4,0,true:"

    assert parse_node_register(nine) == [
        HamiDevice(
            "GPU-0055", 3, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB", 0, "hami-core", True
        )
    ]
    assert [(d.uuid, d.index, d.numa, d.healthy) for d in parse_node_register(seven)] == [
        ("GPU-a", 0, 1, False),
        ("GPU-b", 1, 0, True),
    ]


@pytest.mark.parametrize(
    ("_case", "value"),
    [
        ("fields", "GPU-a,10,16384:"),
        ("json-no-id", '[{"count":1}]'),
        ("number", "GPU-a,x,1,1,T,0,true:"),
    ],
)
def test_register_malformed_raises_value_error(_case, value):
    with pytest.raises(ValueError):
        parse_node_register(value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("4", Decimal(4)),
        ("16Gi", Decimal(16 * 2**30)),
        ("80G", Decimal(80 * 10**9)),
        ("1e3", Decimal(1000)),
        ("128974848", Decimal(128974848)),
    ],
)
def test_parse_quantity(text, expected):
    assert parse_quantity(text) == expected


def test_quantity_helpers():
    assert cpu_milli("3500m") == 3500
    assert cpu_milli("4") == 4000
    assert bytes_to_mib("80Gi") == 81920
    assert bytes_to_mib("1048576Ki") == 1024
    assert format_mib(12288) == "12Gi"
    assert format_mib(1536) == "1536Mi"
    with pytest.raises(ValueError):
        parse_quantity("lots")


@given(st.integers(min_value=1, max_value=10**7))
def test_format_mib_round_trips(mib):
    assert bytes_to_mib(format_mib(mib)) == mib


@pytest.mark.parametrize(
    ("_case", "status", "permanent"),
    [
        ("timeout", None, False),
        ("server", 500, False),
        ("unavailable", 503, False),
        ("throttled", 429, False),
        ("conflict", 409, False),
        ("gone", 410, False),
        ("bad-request", 400, True),
        ("forbidden", 403, True),
        ("not-found", 404, True),
        ("invalid", 422, True),
    ],
)
def test_error_classification(_case, status, permanent):
    error = ClusterApiError("boom", status=status)

    assert isinstance(error, BackendError)
    assert error.permanent is permanent
    assert is_transient_status(status) is not permanent


def test_watch_expired_is_transient_410():
    error = WatchExpired()

    assert (error.status, error.permanent) == (410, False)
