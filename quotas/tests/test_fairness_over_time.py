"""Fairness over time with the database: decayed fair share on the page and in the API, budgets (top-ups
audited, 80 % / 100 % notices once), loans (state machine, compare-and-set, the min they move for their
window, expiry that survives one bad row), and the validation of every input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core import mail

from portal.choices import MembershipRole
from portal.errors import Conflict, Forbidden, InvalidInput
from portal.models import OperatorAction
from portal.tests.factories import MembershipFactory, UserFactory
from quotas import budgets, loans
from quotas.models import (
    BudgetAlert,
    GpuHourBudget,
    LoanState,
    QuotaChange,
    QuotaGroup,
    QuotaLoan,
    QuotaNotice,
)
from quotas.resources import Side
from quotas.tests.factories import make_node, record_gpu_hours, two_teams_and_a_lender
from quotas.usage import group_snapshot, group_specs

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # Wednesday noon


@pytest.fixture
def pool(team_a: Any, team_b: Any) -> dict[str, Any]:
    """Group `training` (8 H100, fair share half-life one week): team-a and team-b with no min,
    `lab` with a min of 8 GPUs; alice admins team-a, dora admins team-b, lea admins lab."""
    make_node("g1", pool="training", gpu_count=8)
    teams = two_teams_and_a_lender(
        half_life=168, team_a=team_a, team_b=team_b, gpu_min_cpu_milli=64000
    )
    users = {}
    for name, quota in (("alice", teams.a), ("dora", teams.b), ("lea", teams.lender)):
        users[name] = UserFactory(username=name)
        MembershipFactory(user=users[name], tenant=quota.tenant, role=MembershipRole.TENANT_ADMIN)
    return {"group": teams.group, "a": teams.a, "b": teams.b, "lab": teams.lender, **users}


# ------------------------------------------------------------------------------- decayed fair share


def test_three_times_its_share_a_week_ago_shows_on_the_quota_page_and_in_the_api(
    pool: dict[str, Any], client: Any, api_as: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        record_gpu_hours(pool["a"], NOW - timedelta(hours=168, minutes=30), 400.0)
        fair = group_specs(pool["group"], NOW)
        by_name = {s.name: s.fair_share for s in fair}
        assert by_name["team-a"] is not None
        assert by_name["team-b"] is not None
        assert (by_name["team-a"].usage_gpu_hours, by_name["team-a"].percent) == (200.0, 300)
        assert (by_name["team-b"].percent, by_name["team-b"].tier) == (0, 0)
        client.force_login(pool["alice"])
        page = client.get(f"/quotas/{pool['a'].pk}/").content.decode()
        body = api_as(pool["alice"]).get(f"/api/v1/quotas/{pool['a'].pk}/fairness/").json()
    assert (
        "With a 168-hour half-life, this quota used 200.0 decayed GPU-hours against a fair share of "
        "66.7 (300 %), so borrowed GPUs go to the quotas under their share first."
    ) in page
    assert body["fair_share"]["percent_of_share"] == 300
    assert body["fair_share"]["borrow_tier"] == 1


def test_the_runtime_shares_give_the_idle_min_to_the_under_share_team(
    pool: dict[str, Any],
) -> None:
    from quotas.tests.factories import make_workload

    for quota in (pool["a"], pool["b"]):
        for _ in range(8):
            make_workload(quota, state="pending", gpu_count=1, gpu_memory_mib=1024)
    with time_machine.travel(NOW, tick=False):
        before = group_snapshot(pool["group"])
        record_gpu_hours(pool["a"], NOW - timedelta(hours=168, minutes=30), 400.0)
        after = group_snapshot(pool["group"])
    runtime = {q.name: q.side(Side.GPU).runtime.gpu_milli for q in before.ordered()}
    assert runtime == {"lab": 0, "team-a": 4000, "team-b": 4000}
    runtime = {q.name: q.side(Side.GPU).runtime.gpu_milli for q in after.ordered()}
    assert runtime == {"lab": 0, "team-a": 0, "team-b": 8000}


def test_the_half_life_is_validated_on_the_api(
    pool: dict[str, Any], api_as: Any, operator: Any
) -> None:
    group = pool["group"]
    url = f"/api/v1/quota-groups/{group.pk}/"
    client = api_as(operator)
    bad = client.patch(url, {"fair_share_half_life_hours": 99999}, format="json",
                       HTTP_IF_MATCH=f'"{group.version}"')  # fmt: skip
    assert bad.status_code == 400
    assert "fair_share_half_life_hours" in bad.json()["error"]["fields"]
    off = client.patch(url, {"fair_share_half_life_hours": 0}, format="json",
                       HTTP_IF_MATCH=f'"{group.version}"')  # fmt: skip
    assert off.status_code == 200
    assert QuotaGroup.objects.get(pk=group.pk).fair_share_half_life_hours is None


# ------------------------------------------------------------------------------------------ budgets


def test_operators_top_up_a_budget_and_it_is_in_the_activity_log(
    pool: dict[str, Any], operator: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        budget = budgets.create_budget(
            pool["a"], {"period": "week", "limit_gpu_hours": "100"}, actor=operator
        )
        for hour in range(48):
            record_gpu_hours(
                pool["a"], datetime(2026, 11, 30, tzinfo=UTC) + timedelta(hours=hour), 2.5
            )
        assert group_specs(pool["group"], NOW)[1].budget.exhausted  # team-a: 120 of 100
        budgets.top_up_budget(budget, "50", actor=operator, reason="paper deadline")
        state = {s.name: s.budget for s in group_specs(pool["group"], NOW)}["team-a"]
    assert (state.used, state.limit, state.exhausted) == (120.0, 150.0, False)
    entry = OperatorAction.objects.get(action="budget_top_up")
    assert (entry.target_name, entry.reason) == ("training/team-a", "paper deadline")
    assert entry.summary == (
        "Added 50 GPU-hours to the budget of team-a this week (since Mon 30 Nov 00:00 UTC)."
    )
    assert QuotaChange.objects.filter(subject="budget", quota=pool["a"]).count() == 1


def test_only_operators_set_budgets_and_bad_numbers_name_the_field(
    pool: dict[str, Any], operator: Any
) -> None:
    with pytest.raises(Forbidden):
        budgets.create_budget(pool["a"], {"limit_gpu_hours": "10"}, actor=pool["alice"])
    for values, field in (
        ({"limit_gpu_hours": "-1"}, "limit_gpu_hours"),
        ({"limit_gpu_hours": "1e12"}, "limit_gpu_hours"),
        ({"limit_gpu_hours": "1.234"}, "limit_gpu_hours"),
        ({"limit_gpu_hours": "10", "period": "year"}, "period"),
        ({"limit_gpu_hours": "10", "hard": "yes"}, "hard"),
    ):
        with pytest.raises(InvalidInput) as error:
            budgets.create_budget(pool["a"], values, actor=operator)
        assert list(error.value.fields) == [field]
    assert GpuHourBudget.objects.count() == 0
    budget = budgets.create_budget(pool["a"], {"limit_gpu_hours": "10"}, actor=operator)
    with pytest.raises(InvalidInput) as error:
        budgets.top_up_budget(budget, "5", actor=operator, reason="")
    assert list(error.value.fields) == ["reason"]


def test_team_admins_are_told_at_80_and_100_percent_once_per_period(
    pool: dict[str, Any], operator: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        budgets.create_budget(pool["a"], {"limit_gpu_hours": "100"}, actor=operator)
        record_gpu_hours(pool["a"], datetime(2026, 11, 30, 8, tzinfo=UTC), 85.0)
        first = budgets.check_budget_alerts(NOW)
        again = budgets.check_budget_alerts(NOW)
        record_gpu_hours(pool["a"], datetime(2026, 12, 1, 8, tzinfo=UTC), 15.0)
        full = budgets.check_budget_alerts(NOW)
    assert (first.sent, again.sent, full.sent) == (1, 0, 1)
    notices = list(QuotaNotice.objects.filter(quota=pool["a"]).order_by("id"))
    assert [n.kind for n in notices] == ["budget_80", "budget_100"]
    assert notices[0].recipients == ["alice"]
    assert notices[1].message == (
        "Quota team-a reached 100 % of its GPU-hour budget (100.0 of 100.0 GPU-hours used this week "
        "(since Mon 30 Nov 00:00 UTC)): new borrowing stops; work within min still starts."
    )
    assert BudgetAlert.objects.count() == 2


def test_budget_notices_are_mailed_to_team_admins_with_an_address(
    pool: dict[str, Any], operator: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with time_machine.travel(NOW, tick=False), django_capture_on_commit_callbacks(execute=True):
        budgets.create_budget(pool["a"], {"limit_gpu_hours": "10"}, actor=operator)
        record_gpu_hours(pool["a"], datetime(2026, 11, 30, 8, tzinfo=UTC), 10.0)
        budgets.check_budget_alerts(NOW)
    assert [m.to for m in mail.outbox] == [["alice@example.com"], ["alice@example.com"]]


# -------------------------------------------------------------------------------------------- loans


def _ask(pool: dict[str, Any], gpus: int = 2, days: int = 7) -> QuotaLoan:
    return loans.request_loan(
        borrower=pool["a"],
        lender=pool["lab"],
        gpus=gpus,
        starts_at=NOW,
        ends_at=NOW + timedelta(days=days),
        reason="thesis run",
        actor=pool["alice"],
    )


def test_an_approved_loan_moves_min_for_its_window_and_expires_by_itself(
    pool: dict[str, Any],
) -> None:
    def mins() -> dict[str, tuple[int, int]]:
        return {
            s.name: (s.min[Side.GPU].gpu_milli, s.min[Side.GPU].cpu_milli)
            for s in group_specs(pool["group"], moment)
        }

    with time_machine.travel(NOW, tick=False):
        loan = _ask(pool)
        moment = NOW
        assert mins()["team-a"] == (0, 0)  # requested: nothing moves yet
        loan = loans.decide_loan(loan, approve=True, actor=pool["lea"], expected_version=1)
        assert loan.state == LoanState.APPROVED
        assert mins() == {"lab": (6000, 48000), "team-a": (2000, 16000), "team-b": (0, 0)}
    moment = NOW + timedelta(days=7)  # the window ended: the min is back, even before the task ran
    assert mins() == {"lab": (8000, 64000), "team-a": (0, 0), "team-b": (0, 0)}
    with time_machine.travel(moment, tick=False):
        report = loans.expire_loans()
    assert (report.expired, report.failures.failed) == (1, 0)
    loan.refresh_from_db()
    assert loan.state == LoanState.EXPIRED
    history = QuotaChange.objects.filter(subject="loan", quota=pool["a"]).order_by("id")
    assert [(c.after or {}).get("state") for c in history] == ["requested", "approved", "expired"]
    kinds = list(
        QuotaNotice.objects.filter(quota=pool["lab"]).order_by("id").values_list("kind", flat=True)
    )
    assert kinds == ["loan_requested", "loan_approved", "loan_expired"]


def test_the_expiry_task_survives_one_bad_row(
    pool: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    with time_machine.travel(NOW, tick=False):
        first, second = _ask(pool, gpus=1), _ask(pool, gpus=1)
    real = loans._transition

    def broken(loan: Any, to: str, **kw: Any) -> Any:
        if int(getattr(loan, "pk", loan)) == first.pk:
            raise RuntimeError("bad row")
        return real(loan, to, **kw)

    monkeypatch.setattr(loans, "_transition", broken)
    with time_machine.travel(NOW + timedelta(days=8), tick=False):
        report = loans.expire_loans()
    assert (report.expired, report.failures.failed_ids) == (1, [first.pk])
    assert QuotaLoan.objects.get(pk=second.pk).state == LoanState.EXPIRED
    assert QuotaLoan.objects.get(pk=first.pk).state == LoanState.REQUESTED


def test_transitions_are_compare_and_set_and_only_the_right_people_decide(
    pool: dict[str, Any], operator: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        loan = _ask(pool)
        with pytest.raises(Forbidden):
            loans.decide_loan(loan, approve=True, actor=pool["alice"])  # the borrower's admin
        with pytest.raises(Forbidden):
            loans.decide_loan(loan, approve=True, actor=pool["dora"])  # a bystander
        with pytest.raises(Conflict):
            loans.decide_loan(loan, approve=True, actor=pool["lea"], expected_version=7)
        declined = loans.decide_loan(loan, approve=False, actor=operator, note="not this week")
        with pytest.raises(Conflict) as error:
            loans.decide_loan(declined, approve=True, actor=pool["lea"])
    assert error.value.code == "illegal_transition"
    assert declined.state == LoanState.DECLINED
    entry = OperatorAction.objects.get(action="loan_decline")
    assert (entry.reason, entry.target_name) == ("not this week", "training/team-a")


def test_a_lender_cannot_promise_more_than_its_min(pool: dict[str, Any]) -> None:
    with time_machine.travel(NOW, tick=False):
        loans.decide_loan(_ask(pool, gpus=6), approve=True, actor=pool["lea"])
        with pytest.raises(InvalidInput) as error:
            _ask(pool, gpus=3)
    assert error.value.fields == {
        "gpus": ["lab has a min of 8 GPUs and already lends 6 in that window; 3 more would be 9."]
    }


def test_loan_requests_through_the_api_name_the_bad_field(
    pool: dict[str, Any], api_as: Any
) -> None:
    client = api_as(pool["alice"])
    base = {
        "borrower": pool["a"].pk,
        "lender": pool["lab"].pk,
        "gpus": 2,
        "starts_at": "2026-12-02T12:00:00Z",
        "ends_at": "2026-12-09T12:00:00Z",
    }
    with time_machine.travel(NOW, tick=False):
        for change, field in (
            ({"gpus": 0}, "gpus"),
            ({"gpus": 10**6}, "gpus"),
            ({"ends_at": "2026-12-01T00:00:00Z"}, "ends_at"),
            ({"ends_at": "2027-06-01T00:00:00Z"}, "ends_at"),
            ({"lender": pool["a"].pk}, "lender"),
            ({"starts_at": "soon"}, "starts_at"),
        ):
            response = client.post("/api/v1/quota-loans/", {**base, **change}, format="json")
            assert response.status_code == 400, change
            assert field in response.json()["error"]["fields"], change
        assert QuotaLoan.objects.count() == 0
        created = client.post("/api/v1/quota-loans/", base, format="json")
        assert created.status_code == 201
        loan_id = created.json()["id"]
        approved = api_as(pool["lea"]).post(
            f"/api/v1/quota-loans/{loan_id}/approve/", {}, format="json"
        )
        again = api_as(pool["lea"]).post(
            f"/api/v1/quota-loans/{loan_id}/decline/", {}, format="json"
        )
        seen_by_b = api_as(pool["dora"]).get("/api/v1/quota-loans/").json()["results"]
    assert (approved.status_code, approved.json()["state"], approved.json()["active"]) == (
        200, "approved", True,
    )  # fmt: skip
    assert again.status_code == 409
    assert seen_by_b == []


def test_both_teams_see_the_loan_on_their_quota_pages(pool: dict[str, Any], client: Any) -> None:
    with time_machine.travel(NOW, tick=False):
        loans.decide_loan(_ask(pool), approve=True, actor=pool["lea"])
        client.force_login(pool["alice"])
        borrower_page = client.get(f"/quotas/{pool['a'].pk}/").content.decode()
        client.force_login(pool["lea"])
        lender_page = client.get(f"/quotas/{pool['lab'].pk}/").content.decode()
    assert "borrowed from lab" in borrower_page
    assert "(in effect)" in borrower_page
    assert "lent to team-a" in lender_page
    assert "(in effect)" in lender_page


def test_the_loan_form_shows_the_services_refusal_on_the_field(
    pool: dict[str, Any], client: Any
) -> None:
    client.force_login(pool["alice"])
    with time_machine.travel(NOW, tick=False):
        response = client.post(
            f"/quotas/{pool['a'].pk}/fairness/",
            {
                "action": "request_loan",
                "lender": pool["lab"].pk,
                "gpus": 9,
                "starts_at": "2026-12-02T12:00",
                "ends_at": "2026-12-03T12:00",
            },
        )
    assert response.status_code == 400
    assert "lab has a min of 8 GPUs and already lends 0 in that window" in response.content.decode()
    assert QuotaLoan.objects.count() == 0


def test_operators_top_up_and_cap_from_the_quota_page_and_bad_input_is_a_form_error(
    pool: dict[str, Any], client: Any, operator: Any
) -> None:
    budget = budgets.create_budget(pool["a"], {"limit_gpu_hours": "10"}, actor=operator)
    client.force_login(operator)
    url = f"/quotas/{pool['a'].pk}/fairness/"
    missing_reason = client.post(url, {"action": "top_up", "budget": budget.pk, "gpu_hours": "5"})
    assert missing_reason.status_code == 400
    assert "This field is required." in missing_reason.content.decode()
    done = client.post(
        url, {"action": "top_up", "budget": budget.pk, "gpu_hours": "5", "reason": "deadline"}
    )
    assert done.status_code == 302
    assert OperatorAction.objects.filter(action="budget_top_up").count() == 1
    capped = client.post(url, {"action": "user_cap", "max_gpus_per_user": "3"})
    assert capped.status_code == 302
    pool["a"].refresh_from_db()
    assert pool["a"].max_gpus_per_user == 3
    page = client.get(f"/quotas/{pool['a'].pk}/").content.decode()
    assert "at most 3 GPUs held by one person at once" in page
    client.force_login(pool["alice"])
    refused = client.post(url, {"action": "user_cap", "max_gpus_per_user": "8"})
    assert refused.status_code == 400
    assert "Only platform operators set the per-person cap of a quota." in refused.content.decode()
    pool["a"].refresh_from_db()
    assert pool["a"].max_gpus_per_user == 3


# ------------------------------------------------------------------------------ loans from operators


def test_the_operators_lend_unassigned_capacity_for_a_window_and_it_expires_by_itself(
    pool: dict[str, Any], api_as: Any, operator: Any, client: Any
) -> None:
    make_node("g2", pool="training", gpu_count=4)  # 12 GPUs, 8 promised (lab's min): 4 unassigned
    base = {
        "borrower": pool["a"].pk,
        "gpus": 2,
        "starts_at": "2026-12-02T12:00:00Z",
        "ends_at": "2026-12-03T12:00:00Z",
    }
    with time_machine.travel(NOW, tick=False):
        too_many = api_as(pool["alice"]).post(
            "/api/v1/quota-loans/", {**base, "gpus": 5}, format="json"
        )
        asked = api_as(pool["alice"]).post("/api/v1/quota-loans/", base, format="json")
        loan_id = asked.json()["id"]
        by_lea = api_as(pool["lea"]).post(f"/api/v1/quota-loans/{loan_id}/approve/", {},
                                          format="json")  # fmt: skip
        by_alice = api_as(pool["alice"]).post(f"/api/v1/quota-loans/{loan_id}/approve/", {},
                                              format="json")  # fmt: skip
        approved = api_as(operator).post(f"/api/v1/quota-loans/{loan_id}/approve/", {},
                                         format="json")  # fmt: skip
        during = group_snapshot(pool["group"]).quota(pool["a"].pk).spec.min[Side.GPU].gpu_milli
        client.force_login(pool["alice"])
        page = client.get(f"/quotas/{pool['a'].pk}/").content.decode()
    assert too_many.status_code == 400
    assert too_many.json()["error"]["fields"]["gpus"] == [
        "training has 12 GPUs, 8 promised as min and 0 already lent by the operators in that "
        "window: 4 unassigned, 5 asked."
    ]
    assert (asked.status_code, asked.json()["lender"], asked.json()["lender_name"]) == (
        201, None, "the operators",
    )  # fmt: skip
    assert by_lea.status_code == 404  # not lab's loan: lab's admin does not even see it
    assert by_alice.status_code == 403
    assert by_alice.json()["error"]["message"] == (
        "Only an operator decides a loan asked of the operators."
    )
    assert (approved.status_code, approved.json()["state"], approved.json()["active"]) == (
        200, "approved", True,
    )  # fmt: skip
    assert during == 2000  # team-a's min grows by 2 GPUs; nobody else's shrinks
    assert group_snapshot(pool["group"]).quota(pool["lab"].pk).spec.min[Side.GPU].gpu_milli == 8000
    assert "borrowed from the operators" in page
    assert OperatorAction.objects.filter(action="loan_approve").count() == 1
    with time_machine.travel(NOW + timedelta(days=1, seconds=1), tick=False):
        report = loans.expire_loans()
        after = group_snapshot(pool["group"]).quota(pool["a"].pk).spec.min[Side.GPU].gpu_milli
    assert (report.expired, after) == (1, 0)
    assert QuotaLoan.objects.get(pk=loan_id).state == LoanState.EXPIRED


def test_a_team_admin_asks_the_operators_from_the_quota_page(
    pool: dict[str, Any], client: Any
) -> None:
    make_node("g2", pool="training", gpu_count=4)
    client.force_login(pool["alice"])
    with time_machine.travel(NOW, tick=False):
        form = client.get(f"/quotas/{pool['a'].pk}/").content.decode()
        response = client.post(
            f"/quotas/{pool['a'].pk}/fairness/",
            {
                "action": "request_loan",
                "lender": "",
                "gpus": 3,
                "starts_at": "2026-12-02T12:00",
                "ends_at": "2026-12-03T12:00",
            },
        )
    assert "The operators (the group&#x27;s unassigned GPUs)" in form
    assert response.status_code == 302
    loan = QuotaLoan.objects.get()
    assert (loan.lender, loan.borrower, loan.gpus, loan.state) == (
        None, pool["a"], 3, LoanState.REQUESTED,
    )  # fmt: skip
