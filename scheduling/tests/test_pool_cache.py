"""A worker's cached reading of a pool follows the inventory: what a submission is judged against after
a sync is the new inventory, never the cached old one."""

from __future__ import annotations

import pytest

from scheduling.inventory import sync_inventory_rows
from scheduling.services.charge import PoolCards
from scheduling.services.feasibility import NeverFits, check_gang_fits
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
