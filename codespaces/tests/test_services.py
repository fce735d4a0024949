"""Services end to end on the simulated cluster: create → running on a named GPU, stop, start, delete."""

from __future__ import annotations

from typing import Any

import pytest

from codespaces import services
from codespaces.choices import CodespaceState as S
from codespaces.choices import EventKind
from codespaces.models import Codespace
from codespaces.tests.factories import CodespaceTemplateFactory
from codespaces.tests.fixtures import quota_with
from portal.errors import InvalidInput
from quotas import usage
from quotas.models import Quota
from scheduling import services as scheduling_services
from scheduling.models import Placement, Workload
from scheduling.services import reconcile

pytestmark = pytest.mark.django_db


def create(user: Any, tenant: Any, name: str, capture: Any, **kwargs: Any) -> Codespace:
    kwargs.setdefault("template", "pytorch")
    kwargs.setdefault("preset", "quarter-h100")
    with capture(execute=True):
        codespace = services.create_codespace(user=user, tenant=tenant, name=name, **kwargs)
    run_status_sync(capture)
    codespace.refresh_from_db()
    return codespace


def run_status_sync(capture: Any) -> None:
    """What beat does every few seconds: the simulated cluster reports placed pods running."""
    with capture(execute=True):
        reconcile.sync_status()


def test_create_runs_on_a_named_node_and_gpu(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a free H100 node; when bob creates a 25% / 20 GiB codespace
    codespace = create(bob, team_a, "bob-dev", django_capture_on_commit_callbacks)
    # then it runs on h100-a with one GPU slice of exactly that size
    assert codespace.state == S.RUNNING
    assert codespace.node_name == "h100-a"
    assert codespace.gpu_names in ("gpu0", "gpu1")
    assert codespace.gpu_model_placed == "H100"
    assert (codespace.gpu_milli, codespace.gpu_memory_mib) == (250, 20480)
    workload = Workload.objects.get(pk=codespace.workload_id)
    assert (workload.kind, workload.state, workload.gpu_milli) == ("codespace", "running", 250)
    states = list(codespace.events.order_by("id").values_list("to_state", flat=True))
    assert states == [S.QUEUED, S.PLACED, S.STARTING, S.RUNNING]


def test_over_quota_request_queues_with_the_quota_and_numbers(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given team-a may use at most 1 GPU; when bob asks for 2 whole H100s
    codespace = create(bob, team_a, "big", django_capture_on_commit_callbacks, preset="2x-h100")
    # then it waits, and says which quota and what numbers
    assert codespace.state == S.QUEUED
    assert codespace.waiting_reason == "team-a GPU side: 0 of max 1 GPU in use, request 2."
    assert codespace.waiting_position == 1
    # and the reconciler copies the reason onto the codespace and its timeline
    assert services.reconcile_codespaces() == 1
    codespace.refresh_from_db()
    assert (codespace.pending_code, codespace.waiting_position) == ("quota_max", 1)
    assert codespace.events.filter(kind=EventKind.PENDING).count() == 1
    assert services.reconcile_codespaces() == 0  # nothing new: no duplicate event


class BackendSpy:
    """Records the release calls the simulated backend receives (delete_home tells home kept/removed)."""

    def __init__(self, monkeypatch: Any) -> None:
        from scheduling.backends.simulated.backend import SimulatedBackend

        self.calls: list[tuple[int, bool]] = []
        self.homes: list[str] = []
        original = SimulatedBackend.release

        def release(
            backend: Any,
            workload_id: int,
            name: str,
            *,
            delete_home: bool,
            home_name: str = "",
            placement_id: int | None = None,
        ) -> None:
            self.calls.append((workload_id, delete_home))
            self.homes.append(home_name)
            original(
                backend,
                workload_id,
                name,
                delete_home=delete_home,
                home_name=home_name,
                placement_id=placement_id,
            )

        monkeypatch.setattr(SimulatedBackend, "release", release)


def test_stop_start_delete_round_trip(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: Any,
) -> None:
    spy = BackendSpy(monkeypatch)
    capture = django_capture_on_commit_callbacks
    codespace = create(bob, team_a, "bob-dev", capture)
    first_workload = codespace.workload_id

    # stop: the placement is released, the home volume kept
    with capture(execute=True):
        services.stop_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    assert (codespace.node_name, codespace.gpu_names) == ("", "")
    assert first_workload is not None
    assert Workload.objects.get(pk=first_workload).state == "released"
    assert Placement.objects.get(workload_id=first_workload).released_at is not None
    assert spy.calls == [(first_workload or 0, False)]

    # start: a new workload, running again
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert codespace.workload_id != first_workload
    assert codespace.node_name == "h100-a"

    # delete: placement released and the home volume deleted; the name is free again
    second_workload = codespace.workload_id
    with capture(execute=True):
        services.delete_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    assert codespace.state == S.DELETED
    assert spy.calls == [(first_workload or 0, False), (second_workload or 0, True)]
    # both releases name the same home volume: the one the codespace keeps for its whole life
    assert spy.homes == [codespace.home_volume_name] * 2
    transitions = list(codespace.events.order_by("id").values_list("to_state", flat=True))
    assert transitions == [
        S.QUEUED,
        S.PLACED,
        S.STARTING,
        S.RUNNING,
        S.STOPPING,
        S.STOPPED,
        S.QUEUED,
        S.PLACED,
        S.STARTING,
        S.RUNNING,
        S.DELETING,
        S.DELETED,
    ]
    again = create(bob, team_a, "bob-dev", capture)
    assert again.state == S.RUNNING


def test_reclaim_by_the_scheduler_stops_it_with_a_notice(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from scheduling import services as scheduling

    capture = django_capture_on_commit_callbacks
    codespace = create(bob, team_a, "bob-dev", capture)
    with capture(execute=True):
        scheduling.release_workload(
            codespace.workload_id, reason="reclaimed: team-b needs its guaranteed min"
        )
    codespace.refresh_from_db()
    assert codespace.state == S.STOPPED
    notice = codespace.events.get(kind=EventKind.RECLAIMED)
    assert "the home volume is kept" in notice.message
    # it can be started again
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING


def test_failed_workload_fails_the_codespace_with_the_reason(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from scheduling import services as scheduling

    capture = django_capture_on_commit_callbacks
    codespace = create(bob, team_a, "bob-dev", capture)
    with capture(execute=True):
        scheduling.fail_workloads(
            [codespace.workload_id or 0], reason="GPU h100-a/gpu0 fell off the bus"
        )
    codespace.refresh_from_db()
    assert codespace.state == S.FAILED
    assert codespace.failure_reason == "GPU h100-a/gpu0 fell off the bus"
    with capture(execute=True):
        services.start_codespace(codespace, actor=bob)
    codespace.refresh_from_db()
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert (codespace.state, codespace.failure_reason) == (S.RUNNING, "")


@pytest.mark.parametrize(
    ("_case", "kwargs", "field", "message"),
    [
        (
            "compute 0%",
            {"preset": None, "size": {"gpu_percent": 0, "gpu_memory_gib": 20}},
            "gpu_percent",
            "Compute must be between 1% and 100% of one GPU (got 0%).",
        ),
        (
            "compute 101%",
            {"preset": None, "size": {"gpu_percent": 101, "gpu_memory_gib": 20}},
            "gpu_percent",
            "Compute must be between 1% and 100% of one GPU (got 101%).",
        ),
        (
            "GPU memory above the largest GPU",
            {"preset": None, "size": {"gpu_percent": 25, "gpu_memory_gib": 81}},
            "gpu_memory_gib",
            "81 GiB is more than the largest GPU in pool gpu (80 GiB).",
        ),
        (
            "slice on a whole-card-only model",
            {"preset": None, "size": {"gpu_percent": 25, "gpu_memory_gib": 4, "gpu_model": "T4"}},
            "gpu_model",
            "T4 GPUs can't be shared: choose whole cards or another model.",
        ),
        (
            "unknown template",
            {"template": "tensorflow"},
            "template",
            "Unknown template tensorflow.",
        ),
        (
            "bad name",
            {"name": "Bob_Dev"},
            "name",
            "Use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit.",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_created(
    _case: str,
    kwargs: dict[str, Any],
    field: str,
    message: str,
    bob: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
) -> None:
    params: dict[str, Any] = {"template": "pytorch", "preset": "quarter-h100", "name": "bob-dev"}
    params.update(kwargs)
    if isinstance(params.get("size"), dict):
        params["size"] = services.SizeRequest(**params["size"])
    with pytest.raises(InvalidInput) as refused:
        services.create_codespace(user=bob, tenant=team_a, **params)
    assert refused.value.fields[field] == [message]
    assert Codespace.objects.count() == 0
    assert Workload.objects.count() == 0


def test_forbidden_template_name_clash_and_per_user_limit(
    bob: Any,
    alice: Any,
    team_a: Any,
    team_b: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    other = CodespaceTemplateFactory(name="vision-only")
    other.allowed_tenants.set([team_b])
    with pytest.raises(InvalidInput) as forbidden:
        services.create_codespace(
            user=bob, tenant=team_a, template="vision-only", name="x", size=services.SizeRequest()
        )
    assert forbidden.value.fields == {
        "template": ["Template 'vision-only' is not available to team team-a."]
    }
    create(bob, team_a, "one", capture, preset="cpu")
    with pytest.raises(InvalidInput) as clash:
        services.create_codespace(
            user=alice, tenant=team_a, template="pytorch", preset="cpu", name="one"
        )
    assert clash.value.fields == {
        "name": ["A codespace named 'one' already exists; choose another name."]
    }
    create(bob, team_a, "two", capture, preset="cpu")
    with pytest.raises(InvalidInput) as limit:
        services.create_codespace(
            user=bob, tenant=team_a, template="pytorch", preset="cpu", name="three"
        )
    assert limit.value.fields == {"template": ["Limit reached: 2 of 2 codespaces per user."]}
    assert sorted(Codespace.objects.values_list("name", flat=True)) == ["one", "two"]
    assert Workload.objects.count() == 2


def test_picker_shows_what_starts_now_and_what_queues(
    bob: Any, team_a: Any, quota_a: Any, template: Any
) -> None:
    data = services.picker_data(template, quota_a)
    assert data.largest_free_slice == (1000, 81920)
    assert data.headroom["max_gpus"] == 1.0
    assert data.headroom["used_gpus"] == 0.0
    by_name = {o.preset.name: o for o in data.options}
    assert by_name["quarter-h100"].starts_now is True
    assert by_name["quarter-h100"].node == "h100-a"
    assert by_name["2x-h100"].starts_now is False
    assert by_name["2x-h100"].reason == "team-a GPU side: 0 of max 1 GPU in use, request 2."
    assert by_name["t4"].starts_now is True
    assert by_name["cpu"].starts_now is True


def test_picker_applies_the_per_person_limit_that_create_applies(
    bob: Any, alice: Any, team_a: Any, gpu_pool: Any, template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    # issue 38: the picker said "starts now" for a size the per-person limit then held back at Create
    # given a quota of 2 GPUs where one person may hold 1, and bob holding the T4 (1 GPU)
    quota = quota_with(gpu_pool, team_a, max_gpus=2, min_gpus=1)
    Quota.objects.filter(pk=quota.pk).update(max_gpus_per_user=1)
    create(bob, team_a, "bob-t4", django_capture_on_commit_callbacks, preset="t4", quota=quota.pk)
    # when bob opens the picker, a quarter H100 would queue, saying why; alice's still starts now
    for_bob = {o.preset.name: o for o in services.picker_data(template, quota, owner=bob).options}
    for_alice = {
        o.preset.name: o for o in services.picker_data(template, quota, owner=alice).options
    }
    assert (for_bob["quarter-h100"].starts_now, for_bob["quarter-h100"].code) == (False, "user_cap")
    assert for_bob["quarter-h100"].reason == (
        "team-a: one person may hold at most 1 GPU of this quota; its owner holds 1, request 0.25."
    )
    assert for_bob["cpu"].starts_now is True
    assert for_alice["quarter-h100"].starts_now is True
    # and Create holds it back for the same reason
    held = create(bob, team_a, "bob-q", django_capture_on_commit_callbacks, quota=quota.pk)
    assert held.workload.pending_code == "user_cap"


def test_savings_counts_whole_cards_vs_cards_occupied(
    bob: Any,
    alice: Any,
    team_a: Any,
    quota_a: Any,
    template: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    capture = django_capture_on_commit_callbacks
    create(bob, team_a, "bob-dev", capture)
    create(alice, team_a, "alice-dev", capture)
    create(alice, team_a, "alice-cpu", capture, preset="cpu")
    result = services.savings()
    assert result.codespaces == 2
    assert result.cards_without_slicing == 2
    assert result.cards_occupied == 1  # the packing policy puts both 25% slices on one H100
    assert result.cards_saved == 1
    assert result.percent_saved == 50.0
    assert result.per_pool == [
        {"pool": "gpu", "codespaces": 2, "cards_without_slicing": 2, "cards_occupied": 1}
    ]


def test_gpu_failure_requeues_it_and_it_moves_to_a_healthy_gpu(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from scheduling import services as scheduling
    from scheduling.models import Gpu

    capture = django_capture_on_commit_callbacks
    codespace = create(bob, team_a, "bob-dev", capture)
    failed = Gpu.objects.get(
        node__name="h100-a", index=int(codespace.gpu_names.removeprefix("gpu"))
    )
    with capture(execute=True):
        scheduling.fail_gpu(failed.pk)
    run_status_sync(capture)
    codespace.refresh_from_db()
    assert codespace.state == S.RUNNING
    assert codespace.gpu_names == f"gpu{1 - failed.index}"
    notice = codespace.events.get(kind=EventKind.NOTICE, to_state=S.QUEUED)
    assert notice.message == (
        f"Requeued by the scheduler: its placement on h100-a / gpu{failed.index} was released "
        "(GPU or node failure, drain, defragmentation)."
    )
    assert list(codespace.events.order_by("id").values_list("to_state", flat=True))[4:] == [
        S.QUEUED,
        S.PLACED,
        S.STARTING,
        S.RUNNING,
    ]


def test_node_failure_with_nowhere_to_go_requeues_it_with_the_reason(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from scheduling import services as scheduling
    from scheduling.models import Node

    capture = django_capture_on_commit_callbacks
    codespace = create(bob, team_a, "bob-dev", capture)
    with capture(execute=True):
        scheduling.fail_node(Node.objects.get(name="h100-a").pk)
    codespace.refresh_from_db()
    assert (codespace.state, codespace.node_name) == (S.QUEUED, "")
    notice = codespace.events.get(kind=EventKind.NOTICE, to_state=S.QUEUED)
    assert notice.message == "Requeued by the scheduler: Node h100-a failed; requeued."
    assert codespace.waiting_reason == (
        "team-a GPU side: request 20 GiB GPU memory is more than the GPU side capacity of group gpu "
        "(16 GiB GPU memory)."
    )


# --- issue item 5: a slice with no model never lands on a whole-card-only model --------------------


def test_slice_with_no_model_waits_for_a_model_that_allows_slices(
    bob: Any,
    team_a: Any,
    quota_a: Any,
    quota_b: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a template that never slices T4s, and both H100s of the pool taken (the T4 is free)
    template = CodespaceTemplateFactory(name="notebook", whole_card_models=["T4"])
    for name in ("h100-0", "h100-1"):
        scheduling_services.submit_workload(
            tenant=quota_b.tenant, quota=quota_b, kind="job_pod", name=name, cpu_milli=1000,
            memory_mib=1024, gpu_count=1, gpu_milli=1000, gpu_models=["H100"],
        )  # fmt: skip
    quota_b.gpu_max_gpu_milli = quota_b.gpu_max_gpu_memory_mib = 10**9
    quota_b.save()
    scheduling_services.run_cycle(quota_b.group_id)
    # when bob creates a 25% / 8 GiB codespace without naming a model
    size = services.SizeRequest(gpu_mode="slice", gpu_percent=25, gpu_memory_gib=8, gpu_model="")
    codespace = create(
        bob,
        team_a,
        "nb",
        django_capture_on_commit_callbacks,
        template=template,
        preset=None,
        size=size,
    )
    # then it waits for an H100 rather than landing on the T4
    assert codespace.state == S.QUEUED
    workload = Workload.objects.get(pk=codespace.workload_id)
    assert workload.gpu_models == ["H100"]
    assert not Placement.objects.filter(workload=workload).exists()


def test_slice_with_no_model_is_refused_when_no_model_of_the_pool_allows_slices(
    bob: Any, team_a: Any, quota_a: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a template that slices neither the pool's H100s nor its T4
    template = CodespaceTemplateFactory(name="notebook", whole_card_models=["H100", "T4"])
    size = services.SizeRequest(gpu_mode="slice", gpu_percent=25, gpu_memory_gib=8, gpu_model="")
    # when bob asks for a slice without a model; then the refusal names gpu_model and why
    with pytest.raises(InvalidInput) as refused:
        create(
            bob, team_a, "nb", django_capture_on_commit_callbacks,
            template=template, preset=None, size=size,
        )  # fmt: skip
    assert "gpu_model" in refused.value.fields
    assert "H100, T4" in refused.value.fields["gpu_model"][0]
    assert not Codespace.objects.exists()
    assert not Workload.objects.exists()


# --- issue item 1: a whole card is charged its memory ----------------------------------------------


def test_whole_card_codespace_is_charged_its_cards_memory(
    bob: Any, team_a: Any, quota_a: Any, template: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given team-a may use 2 GPUs but only 40 GiB of GPU memory
    quota_a.gpu_max_gpu_milli = 2000
    quota_a.gpu_max_gpu_memory_mib = 40 * 1024
    quota_a.gpu_min_gpu_memory_mib = 0
    quota_a.save()
    # when bob asks for one whole T4 (16 GiB) and, later, one whole H100 (80 GiB) is previewed
    t4 = create(bob, team_a, "t4", django_capture_on_commit_callbacks, preset="t4")
    size = services.SizeRequest(gpu_mode="whole", gpu_count=1, gpu_model="H100")
    h100 = services.preview(quota_a, services.validate_size(template, quota_a, size))
    # then the T4 runs and is charged its 16 GiB; the H100 would exceed the 40 GiB max
    assert t4.state == S.RUNNING
    used = usage.group_snapshot(quota_a.group).quota(quota_a.pk).gpu.used
    assert (used.gpu_milli, used.gpu_memory_mib) == (1000, 16 * 1024)
    assert (h100.starts_now, h100.code) == (False, "quota_max")
    assert "GPU memory" in h100.reason


@pytest.mark.parametrize("field", ["idle_window_minutes", "idle_grace_minutes"])
def test_the_model_and_the_database_refuse_an_absurd_idle_window(field: str, template: Any) -> None:
    # issue 9: a window of 9,999,999,999 minutes disabled idle auto-stop for everyone
    from django.core.exceptions import ValidationError
    from django.db import IntegrityError, transaction

    from codespaces.models import CodespaceTemplate

    setattr(template, field, 9_999_999_999)
    with pytest.raises(ValidationError) as refused:
        template.full_clean()
    assert list(refused.value.message_dict) == [field]
    with pytest.raises(IntegrityError), transaction.atomic():
        CodespaceTemplate.objects.filter(pk=template.pk).update(**{field: 43_201})
    assert getattr(CodespaceTemplate.objects.get(pk=template.pk), field) <= 43_200
