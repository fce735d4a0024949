"""Sharing modes per pool: validation, what a pool accepts, what quotas count, the service, API and page."""

from __future__ import annotations

import pytest

from core.units import mig_gpu_equivalent_milli, mig_memory_mib
from portal.errors import InvalidInput
from quotas import services
from quotas.models import QuotaChange, QuotaGroup
from quotas.sharing import (
    Sharing,
    SharingMode,
    clean_sharing,
    quota_gpu_milli,
    request_errors,
    sharing_sentence,
)
from quotas.tests.factories import QuotaGroupFactory

MIG = Sharing(SharingMode.MIG, ("1g.10gb", "3g.40gb"))
TIMESLICE = Sharing(SharingMode.TIMESLICE, (), 4)


def test_mig_instances_count_as_gpu_equivalents() -> None:
    assert [mig_gpu_equivalent_milli(p) for p in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")] == [
        142,
        285,
        428,
        1000,
    ]
    assert mig_memory_mib("1g.10gb") == 10240
    assert quota_gpu_milli(MIG, gpu_count=0, gpu_milli=0, mig_profile="3g.40gb") == 428
    assert quota_gpu_milli(TIMESLICE, gpu_count=1, gpu_milli=250) == 250
    assert quota_gpu_milli(Sharing(SharingMode.SLICE), gpu_count=2, gpu_milli=1000) == 2000
    with pytest.raises(ValueError, match="not a MIG profile"):
        mig_gpu_equivalent_milli("8g.90gb")


@pytest.mark.parametrize(
    ("mode", "profiles", "replicas", "field"),
    [
        ("shared", [], 1, "sharing_mode"),
        ("mig", [], 1, "mig_profiles"),
        ("mig", ["1g.10gb", "big"], 1, "mig_profiles"),
        ("mig", "1g.10gb", 1, "mig_profiles"),
        ("slice", ["1g.10gb"], 1, "mig_profiles"),
        ("timeslice", [], 1, "timeslice_replicas"),
        ("timeslice", [], 17, "timeslice_replicas"),
        ("exclusive", [], 4, "timeslice_replicas"),
        ("timeslice", [], "four", "timeslice_replicas"),
    ],
)
def test_bad_sharing_settings_name_the_field(mode, profiles, replicas, field) -> None:
    sharing, errors = clean_sharing(mode, profiles, replicas)
    assert sharing is None
    assert list(errors) == [field]


def test_good_sharing_settings_are_normalised() -> None:
    assert clean_sharing("mig", ["1g.10gb", "3g.40gb", "1g.10gb"], 1) == (MIG, {})
    assert clean_sharing("timeslice", None, "4") == (TIMESLICE, {})


def test_each_pool_refuses_what_it_does_not_offer() -> None:
    exclusive = Sharing(SharingMode.EXCLUSIVE)
    assert list(request_errors(exclusive, gpu_count=1, gpu_milli=250)) == ["gpu_milli"]
    assert request_errors(exclusive, gpu_count=2, gpu_milli=1000) == {}
    assert request_errors(exclusive, gpu_count=0, gpu_milli=0) == {}
    assert list(request_errors(exclusive, gpu_count=0, gpu_milli=0, mig_profile="1g.10gb")) == [
        "mig_profile"
    ]
    assert request_errors(MIG, gpu_count=0, gpu_milli=0, mig_profile="1g.10gb") == {}
    assert request_errors(MIG, gpu_count=0, gpu_milli=0, mig_profile="2g.20gb") == {
        "mig_profile": ["This pool offers 1g.10gb, 3g.40gb."]
    }
    assert list(request_errors(MIG, gpu_count=1, gpu_milli=1000)) == ["mig_profile"]
    assert request_errors(TIMESLICE, gpu_count=1, gpu_milli=250) == {}
    assert request_errors(TIMESLICE, gpu_count=1, gpu_milli=500) == {
        "gpu_milli": [
            "This pool time-slices each GPU into 4 replicas: ask for one (25 % of a GPU, no memory isolation)."
        ]
    }
    assert request_errors(Sharing(SharingMode.SLICE), gpu_count=1, gpu_milli=300) == {}


def test_time_sliced_pool_says_there_is_no_memory_isolation() -> None:
    assert sharing_sentence(TIMESLICE) == (
        "Time-sliced replicas (no memory isolation): 4 replicas per GPU, each counted as 25 % of a GPU. "
        "Workloads take turns on a GPU; there is no memory isolation: one workload can use all of the "
        "GPU's memory."
    )
    assert sharing_sentence(MIG).startswith("MIG instances (hard isolation): 1g.10gb, 3g.40gb.")


@pytest.mark.django_db
def test_group_created_with_a_mig_mode_and_changed_to_time_slicing_is_audited() -> None:
    saved = services.create_group(
        name="isolated",
        node_selector={"pool": "h100"},
        sharing_mode="mig",
        mig_profiles=["1g.10gb"],
    )
    group = saved.obj
    assert (group.sharing_mode, group.mig_profiles, group.timeslice_replicas) == (
        "mig",
        ["1g.10gb"],
        1,
    )
    updated = services.update_group(
        group, expected_version=1, sharing_mode="timeslice", mig_profiles=[], timeslice_replicas=4
    ).obj
    assert (updated.sharing_mode, updated.mig_profiles, updated.timeslice_replicas) == (
        "timeslice",
        [],
        4,
    )
    change = QuotaChange.objects.order_by("-pk").first()
    assert change is not None
    assert change.before is not None
    assert change.after is not None
    assert (change.before["sharing_mode"], change.after["sharing_mode"]) == ("mig", "timeslice")


@pytest.mark.django_db
def test_invalid_sharing_change_changes_nothing() -> None:
    group = QuotaGroupFactory(name="dev")
    with pytest.raises(InvalidInput) as info:
        services.update_group(group, expected_version=group.version, sharing_mode="mig")
    assert info.value.fields == {
        "mig_profiles": ["A MIG pool lists the profiles its cards offer, e.g. 1g.10gb."]
    }
    fresh = QuotaGroup.objects.get(pk=group.pk)
    assert (fresh.sharing_mode, fresh.version) == ("slice", group.version)
    with pytest.raises(InvalidInput) as info:
        services.create_group(name="bad", sharing_mode="timeslice", timeslice_replicas=1)
    assert list(info.value.fields) == ["timeslice_replicas"]
    assert not QuotaGroup.objects.filter(name="bad").exists()


@pytest.mark.django_db
def test_api_sets_the_mode_and_answers_400_naming_the_field(api_as, operator) -> None:
    client = api_as(operator)
    bad = client.post(
        "/api/v1/quota-groups/",
        {"name": "mig-pool", "sharing_mode": "mig", "mig_profiles": ["9g.90gb"]},
        format="json",
    )
    assert bad.status_code == 400
    assert "mig_profiles" in str(bad.json())
    good = client.post(
        "/api/v1/quota-groups/",
        {"name": "mig-pool", "sharing_mode": "mig", "mig_profiles": ["1g.10gb", "3g.40gb"]},
        format="json",
    )
    assert good.status_code == 201
    body = good.json()
    assert (body["sharing_mode"], body["mig_profiles"], body["timeslice_replicas"]) == (
        "mig",
        ["1g.10gb", "3g.40gb"],
        1,
    )


@pytest.mark.django_db
def test_group_page_and_form_show_the_sharing_mode(client, operator) -> None:
    group = services.create_group(name="dev", sharing_mode="timeslice", timeslice_replicas=4).obj
    client.force_login(operator)
    page = client.get(f"/quotas/groups/{group.pk}/").content.decode()
    assert "GPU sharing: Time-sliced replicas (no memory isolation): 4 replicas per GPU" in page
    form = client.get(f"/quotas/groups/{group.pk}/edit/").content.decode()
    assert 'name="timeslice_replicas"' in form
    assert 'value="timeslice" selected' in form
