"""quotas.demo on the bundled simulated cluster, and the seed scenario: two hungry quotas with
max_A = 2 × max_B borrow the idle capacity 2:1."""

from __future__ import annotations

import io

import pytest

from quotas.models import Quota, QuotaChange, QuotaGroup
from quotas.tests.factories import make_workload
from quotas.usage import group_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded(settings):
    settings.TESSERA_BACKEND = "simulated"
    settings.TESSERA_SIM_INVENTORY = "demo"
    from portal import demo as portal_demo
    from quotas import demo
    from scheduling import demo as scheduling_demo

    out = io.StringIO()
    for _ in range(2):  # idempotent
        portal_demo.seed(out)
        scheduling_demo.seed(out)
        demo.seed(out)
    return out.getvalue()


def test_demo_creates_two_groups_and_six_quotas_once(seeded):
    assert sorted(QuotaGroup.objects.values_list("name", flat=True)) == ["interactive", "training"]
    assert Quota.objects.count() == 6
    assert QuotaChange.objects.filter(action="created").count() == 8
    training = QuotaGroup.objects.get(name="training")
    ml = Quota.objects.get(group=training, tenant__slug="ml-research")
    vision = Quota.objects.get(group=training, tenant__slug="vision")
    assert (ml.gpu_min_gpu_milli, ml.gpu_max_gpu_milli) == (32000, 80000)
    assert (vision.gpu_min_gpu_milli, vision.gpu_max_gpu_milli) == (20000, 40000)
    assert (
        Quota.objects.get(group__name="interactive", tenant__slug="inference").lend_idle_min
        is False
    )
    assert "Quota group training: GPU side 80 GPUs" in seeded


def test_seed_scenario_hungry_quotas_borrow_two_to_one(seeded):
    # given ml-research (max 80 GPUs) and vision (max 40) both asking for their max, inference idle
    training = QuotaGroup.objects.get(name="training")
    ml = Quota.objects.get(group=training, tenant__slug="ml-research")
    vision = Quota.objects.get(group=training, tenant__slug="vision")
    for _ in range(10):
        make_workload(ml, state="pending", gpu_count=8, cpu_milli=1000, memory_mib=1024)
    for _ in range(5):
        make_workload(vision, state="pending", gpu_count=8, cpu_milli=1000, memory_mib=1024)
    # when the runtime shares are computed from the database
    snapshot = group_snapshot(training)
    ml_side = snapshot.quota(ml.pk).gpu
    vision_side = snapshot.quota(vision.pk).gpu
    # then the 28 idle GPUs (80 − mins 32 − 20; inference lends its 8) are borrowed 2:1
    ml_borrow = ml_side.runtime.gpu_milli - ml_side.min.gpu_milli
    vision_borrow = vision_side.runtime.gpu_milli - vision_side.min.gpu_milli
    assert (ml_borrow, vision_borrow) == (18667, 9333)
    assert abs(ml_borrow - 2 * vision_borrow) <= 1
    assert ml_side.runtime.gpu_milli + vision_side.runtime.gpu_milli == 80000
