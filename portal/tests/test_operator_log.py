"""Issue 16: the operators' activity log (page and API): every operator action, filtered by operator,
action, target and time range, paged; for operators only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.test import Client

from portal.errors import InvalidInput
from portal.models import OperatorAction
from portal.operator_log import ActionImpact, clean_reason, record_operator_action
from portal.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def login(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


def record(actor: Any, action: str, target: str, *, reason: str = "", node: str = "") -> None:
    record_operator_action(
        actor=actor,
        action=action,
        target_kind="node",
        target_id=1,
        target_name=target,
        node_name=node or target,
        impact=ActionImpact(summary=f"{action} {target}", workload_ids=(7, 3)),
        reason=reason,
    )


@pytest.fixture
def history(operator: Any) -> Any:
    """Four actions by two operators over three days."""
    other = UserFactory.create(username="olga", is_staff=True)
    with time_machine.travel(datetime(2026, 11, 28, 9, tzinfo=UTC), tick=False):
        record(operator, "cordon", "gpu-a", reason="rack move")
    with time_machine.travel(datetime(2026, 11, 29, 9, tzinfo=UTC), tick=False):
        record(operator, "drain", "gpu-a", reason="kernel upgrade")
        record(other, "drain", "gpu-b", reason="fans")
    with time_machine.travel(datetime(2026, 11, 30, 9, tzinfo=UTC), tick=False):
        record(other, "uncordon", "gpu-a")
    return other


@pytest.mark.parametrize(
    ("_case", "raw", "required", "expected"),
    [
        ("trimmed", "  kernel upgrade \n", True, "kernel upgrade"),
        ("optional empty", "", False, ""),
        ("at the bound", "x" * 500, True, "x" * 500),
    ],
)
def test_clean_reason_accepts(_case: str, raw: str, required: bool, expected: str) -> None:
    assert clean_reason(raw, required=required) == expected


@pytest.mark.parametrize(
    ("_case", "raw", "required", "message"),
    [
        ("required empty", "", True, "A reason is required"),
        ("required blank", " \t ", True, "A reason is required"),
        ("over the bound", "x" * 501, False, "At most 500 characters (got 501)."),
        ("not text", 12, False, "Must be text."),
    ],
)
def test_clean_reason_refuses_naming_the_field(
    _case: str, raw: Any, required: bool, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        clean_reason(raw, required=required)
    assert list(refused.value.fields) == ["reason"]
    assert refused.value.fields["reason"][0].startswith(message)


def test_recording_keeps_who_why_and_the_workloads_once(operator: Any) -> None:
    record(operator, "drain", "gpu-a", reason="kernel upgrade")
    entry = OperatorAction.objects.get()
    assert (entry.actor, entry.actor_name, entry.reason, entry.summary) == (
        operator,
        operator.get_username(),
        "kernel upgrade",
        "drain gpu-a",
    )
    assert sorted(entry.workloads.values_list("workload_id", flat=True)) == [3, 7]


@pytest.mark.parametrize(
    ("_case", "query", "expected"),
    [
        ("all, newest first", "", ["uncordon gpu-a", "drain gpu-b", "drain gpu-a", "cordon gpu-a"]),
        ("by operator", "actor=olga", ["uncordon gpu-a", "drain gpu-b"]),
        ("by action", "action=drain", ["drain gpu-b", "drain gpu-a"]),
        ("by target", "target=gpu-b", ["drain gpu-b"]),
        (
            "by time range",
            "since=2026-11-29T00:00&until=2026-11-30T00:00",
            ["drain gpu-b", "drain gpu-a"],
        ),
    ],
)
def test_activity_log_page_filters(
    _case: str, query: str, expected: list[str], operator: Any, history: Any
) -> None:
    r = login(operator).get(f"/operators/activity/?{query}")
    assert r.status_code == 200
    shown = [e.summary for e in r.context["page"].object_list]
    assert shown == expected
    assert f"{len(expected)} action" in r.content.decode()


def test_activity_log_page_refuses_a_reversed_range_naming_the_field(
    operator: Any, history: Any
) -> None:
    r = login(operator).get("/operators/activity/?since=2026-11-30T00:00&until=2026-11-29T00:00")
    assert r.status_code == 400
    assert "until: Must be after From." in r.content.decode()


def test_activity_log_pages_by_fifty(operator: Any) -> None:
    for i in range(51):
        record(operator, "cordon", f"node-{i:02d}", reason="r")
    c = login(operator)
    first = c.get("/operators/activity/?action=cordon")
    assert len(first.context["page"].object_list) == 50
    assert "page=2" in first.content.decode()
    second = c.get("/operators/activity/?action=cordon&page=2")
    assert [e.target_name for e in second.context["page"].object_list] == ["node-00"]


@pytest.mark.parametrize(
    ("_case", "persona", "page_status", "api_status"),
    [
        ("admin", "alice", 404, 403),
        ("member", "bob", 404, 403),
        ("other", "charlie", 404, 403),
        ("operator", "operator", 200, 200),
    ],
)
def test_activity_log_is_for_operators_only(
    _case: str, persona: str, page_status: int, api_status: int, request: Any, api_as: Any,
    history: Any,
) -> None:  # fmt: skip
    user = request.getfixturevalue(persona)
    assert login(user).get("/operators/activity/").status_code == page_status
    r = api_as(user).get("/api/v1/operator-actions/")
    assert r.status_code == api_status
    if api_status == 200:
        assert len(r.json()["results"]) == 4


def test_activity_api_filters_like_the_page(operator: Any, history: Any, api_as: Any) -> None:
    r = api_as(operator).get("/api/v1/operator-actions/?actor=olga&action=drain")
    assert r.status_code == 200
    [entry] = r.json()["results"]
    assert {k: entry[k] for k in ("actor", "action", "target_name", "reason", "workloads")} == {
        "actor": "olga",
        "action": "drain",
        "target_name": "gpu-b",
        "reason": "fans",
        "workloads": [3, 7],
    }


@pytest.mark.parametrize(
    ("_case", "query", "field"),
    [
        ("unknown action", "action=reboot", "action"),
        ("not a time", "since=yesterday", "since"),
        ("target too long", "target=" + "x" * 151, "target"),
    ],
)
def test_activity_api_refuses_bad_filters_naming_the_field(
    _case: str, query: str, field: str, operator: Any, api_as: Any
) -> None:
    r = api_as(operator).get(f"/api/v1/operator-actions/?{query}")
    assert r.status_code == 400
    assert list(r.json()["error"]["fields"]) == [field]


def test_admin_lists_and_shows_the_audit_trail_read_only(operator: Any, history: Any) -> None:
    operator.is_superuser = True
    operator.save()
    c = login(operator)
    assert c.get("/admin/portal/operatoraction/").status_code == 200
    entry = OperatorAction.objects.first()
    assert entry is not None
    page = c.get(f"/admin/portal/operatoraction/{entry.pk}/change/")
    assert page.status_code == 200
    assert c.get("/admin/portal/operatoraction/add/").status_code == 403


def test_revoking_a_token_asks_once_saying_what_stops_working_then_audits_it(bob: Any) -> None:
    from portal import services

    issued = services.issue_token(bob, name="ci")
    c = login(bob)
    # the token list links to one confirmation page, which changes nothing
    assert (
        f'href="/account/tokens/{issued.token.pk}/revoke/"'
        in c.get("/account/tokens/").content.decode()
    )
    page = c.get(f"/account/tokens/{issued.token.pk}/revoke/")
    assert page.status_code == 200
    assert "stops working at once" in page.content.decode()
    issued.token.refresh_from_db()
    assert issued.token.revoked_at is None
    # confirming revokes it and writes one audit row; a second POST writes none
    assert c.post(f"/account/tokens/{issued.token.pk}/revoke/").status_code == 302
    c.post(f"/account/tokens/{issued.token.pk}/revoke/")
    issued.token.refresh_from_db()
    entry = OperatorAction.objects.get()
    assert issued.token.revoked_at is not None
    assert (entry.actor, entry.action, entry.target_id) == (bob, "token_revoke", issued.token.pk)
    assert (
        entry.summary
        == f"Token {issued.token} (never used) was revoked: scripts and CLIs that send it get 401."
    )


def test_nobody_else_can_see_or_revoke_a_token(bob: Any, charlie: Any) -> None:
    from portal import services

    issued = services.issue_token(bob, name="ci")
    c = login(charlie)
    assert c.get(f"/account/tokens/{issued.token.pk}/revoke/").status_code == 404
    assert c.post(f"/account/tokens/{issued.token.pk}/revoke/").status_code == 404
    issued.token.refresh_from_db()
    assert issued.token.revoked_at is None
    assert not OperatorAction.objects.exists()


def test_activity_api_reads_a_page_in_constant_queries(
    operator: Any, api_as: Any, django_assert_max_num_queries: Any
) -> None:
    # a page of 50 entries costs the same queries as one (no per-row actor or workload lookups)
    for i in range(60):
        record(operator, "cordon", f"node-{i:02d}", reason="r")
    client = api_as(operator)
    client.get("/api/v1/operator-actions/")  # warm the session / token lookups
    with django_assert_max_num_queries(3):
        r = client.get("/api/v1/operator-actions/")
    assert len(r.json()["results"]) == 50
