"""A worker's cached reading of a pool follows the inventory: what a submission is judged against after
a sync is the new inventory, never the cached old one."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.inventory import sync_inventory_rows
from scheduling.services.charge import PoolCards
from scheduling.services.feasibility import NeverFits, check_gang_fits
from scheduling.services.pool_cache import inventory_fingerprint, one_inventory_reading
from scheduling.tests.factories import gpu_node, make_group

pytestmark = pytest.mark.django_db

POD = {"cpu_milli": 1000, "memory_mib": 1024, "gpu_milli": 1000, "gpu_memory_mib": 0}


def test_a_job_refused_for_a_small_pool_fits_once_a_larger_node_joins() -> None:
    group = make_group()
    sync_inventory_rows([gpu_node("n1", "H100", 80, gpus=4)])
    with pytest.raises(NeverFits):
        check_gang_fits(group, [{**POD, "gpu_count": 8}], min_available=1)  # read and cached
    sync_inventory_rows([gpu_node("n1", "H100", 80, gpus=4), gpu_node("n2", "H100", 80, gpus=8)])
    check_gang_fits(group, [{**POD, "gpu_count": 8}], min_available=1)


def test_the_card_a_whole_gpu_is_charged_follows_a_change_of_card_memory() -> None:
    group = make_group()
    sync_inventory_rows([gpu_node("n1", "A100", 40)])
    assert PoolCards.of(group).largest_memory_mib(["A100"]) == 40 * 1024
    sync_inventory_rows([gpu_node("n1", "A100", 80)])  # the same cards, now reported with 80 GiB
    assert PoolCards.of(group).largest_memory_mib(["A100"]) == 80 * 1024


def test_a_node_relabelled_out_of_the_pool_no_longer_counts() -> None:
    group = make_group()
    sync_inventory_rows([gpu_node("n1", "H100", 80, gpus=8), gpu_node("n2", "H100", 80, gpus=2)])
    check_gang_fits(group, [{**POD, "gpu_count": 8}], min_available=1)
    sync_inventory_rows(
        [gpu_node("n1", "H100", 80, gpus=8, pool="other"), gpu_node("n2", "H100", 80, gpus=2)]
    )
    with pytest.raises(NeverFits):
        check_gang_fits(group, [{**POD, "gpu_count": 8}], min_available=1)


def test_within_one_reading_the_inventory_is_summarised_once_and_the_next_reading_sees_changes() -> (
    None
):
    group = make_group()
    sync_inventory_rows([gpu_node("n1", "H100", 80, gpus=4)])

    def both() -> None:
        PoolCards.of(group).largest_memory_mib(["H100"])
        check_gang_fits(group, [{**POD, "gpu_count": 4}], min_available=1)

    both()  # the pool is read and cached
    with CaptureQueriesContext(connection) as fingerprint:
        inventory_fingerprint()
    with CaptureQueriesContext(connection) as outside:
        both()
    with CaptureQueriesContext(connection) as inside, one_inventory_reading():
        both()
        with one_inventory_reading():  # a nested block shares the reading
            both()
    others = len(outside) - 2 * len(fingerprint)  # both() reads the fingerprint twice outside
    assert len(fingerprint) >= 1
    assert others >= 0
    assert len(inside) == len(fingerprint) + 2 * others  # once for four readings inside
    with one_inventory_reading():
        sync_inventory_rows([gpu_node("n1", "H100", 80, gpus=8)])
    with one_inventory_reading():  # the next reading is a new one
        check_gang_fits(group, [{**POD, "gpu_count": 8}], min_available=1)
