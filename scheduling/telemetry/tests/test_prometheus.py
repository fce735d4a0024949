"""The DCGM × HAMi join on fixed vectors (no server, no database)."""

from __future__ import annotations

from scheduling.models import Gpu
from scheduling.telemetry.prometheus import attribute, by_uuid, by_uuid_and_pod
from scheduling.telemetry.samples import Share


def share(workload_id: int, name: str, uuid: str, milli: int, memory: int = 0) -> Share:
    return Share(workload_id, name, "development", int(uuid[-1]), uuid, milli, memory)


GPUS = [Gpu(pk=1, uuid="GPU-1"), Gpu(pk=2, uuid="GPU-2")]


def test_labels_accept_new_and_legacy_names():
    assert by_uuid([({"UUID": "GPU-1"}, 1.0), ({"gpu_uuid": "GPU-2"}, 2.0), ({}, 9.0)]) == {
        "GPU-1": 1.0,
        "GPU-2": 2.0,
    }
    legacy = [
        ({"deviceuuid": "GPU-1", "podname": "a"}, 3.0),
        ({"deviceuuid": "GPU-1", "podname": "a"}, 4.0),
    ]
    assert by_uuid_and_pod([[], legacy]) == {("GPU-1", "a"): 7.0}


def test_without_hami_a_shared_card_is_split_by_allocation_and_memory_by_allocated_memory():
    shares = [share(1, "a", "GPU-1", 250, 10000), share(2, "b", "GPU-1", 750, 30000)]
    out = attribute(shares, GPUS, {}, {"GPU-1": 40.0}, {"GPU-1": 8000.0}, {}, {})
    # 40 % of the card split 1:3 = 10 % and 30 % of the card = 40 % of each slice
    assert out.workload_utilization == {1: 40.0, 2: 40.0}
    assert out.workload_memory_mib == {1: 2000, 2: 6000}
    assert out.gpu_utilization == {1: 40.0}


def test_hami_weights_split_and_sm_active_wins_over_gpu_util():
    shares = [
        share(1, "a", "GPU-1", 500),
        share(2, "b", "GPU-1", 500),
        share(3, "c", "GPU-2", 1000),
    ]
    out = attribute(
        shares,
        GPUS,
        {"GPU-1": 0.6},
        {"GPU-1": 10.0, "GPU-2": 70.0},
        {},
        {("GPU-1", "a"): 30.0, ("GPU-1", "b"): 10.0},
        {},
    )
    assert out.workload_utilization == {1: 90.0, 2: 30.0, 3: 70.0}
    assert out.gpu_utilization == {1: 60.0, 2: 70.0}


def test_no_device_metric_means_no_utilization_rather_than_zero():
    out = attribute([share(1, "a", "GPU-1", 1000)], GPUS, {}, {}, {}, {}, {})
    assert out.workload_utilization == {}
