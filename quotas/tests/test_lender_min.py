"""A lender's min cannot go below the GPUs it lends at once in approved loans (issue 38 #9).

`lab` (min 8 GPUs) lends 3 GPUs to team-a for days 1-5 and 1 GPU to team-b for days 2-3: 4 GPUs at once
on day 2. Lowering lab's GPU min to 3 is refused, naming the min field with the numbers, in the API and
on the quota form (both through `quotas.services.validate_quota`); 4 is accepted, and a loan declined or
already over does not count.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from quotas import loans
from quotas.models import Quota, QuotaLoan
from quotas.tests.factories import make_node, two_teams_and_a_lender
from quotas.tests.test_views import _form_data

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REFUSAL = (
    "lab lends 4 GPUs of its min at once in approved loans, from 2026-12-04 12:00 until "
    "2026-12-05 12:00 UTC; its GPU min cannot go below 4 GPUs."
)


def _lend(
    lender: Quota, borrower: Quota, gpus: int, days: tuple[int, int], actor: Any
) -> QuotaLoan:
    loan = loans.request_loan(
        borrower=borrower,
        lender=lender,
        gpus=gpus,
        starts_at=NOW + timedelta(days=days[0]),
        ends_at=NOW + timedelta(days=days[1]),
        reason="deadline",
        actor=actor,
    )
    return loans.decide_loan(loan, approve=True, actor=actor, expected_version=loan.version)


@pytest.fixture
def lab(team_a: Any, team_b: Any, operator: Any) -> Quota:
    make_node("g1", pool="training", gpu_count=8)
    teams = two_teams_and_a_lender(half_life=None, team_a=team_a, team_b=team_b)
    with time_machine.travel(NOW, tick=False):
        _lend(teams.lender, teams.a, 3, (1, 5), operator)
        _lend(teams.lender, teams.b, 1, (2, 3), operator)
    teams.lender.refresh_from_db()
    return teams.lender


def _patch(api_as: Any, operator: Any, quota: Quota, gpu_min: int) -> Any:
    return api_as(operator).patch(
        f"/api/v1/quotas/{quota.pk}/",
        {"gpu_min_gpu_milli": gpu_min},
        format="json",
        HTTP_IF_MATCH=f'"{quota.version}"',
    )


def test_the_api_refuses_a_min_below_the_gpus_lent_at_once(
    lab: Quota, operator: Any, api_as: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        response = _patch(api_as, operator, lab, 3000)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"gpu_min_gpu_milli": [REFUSAL]}
    lab.refresh_from_db()
    assert lab.gpu_min_gpu_milli == 8000


def test_the_api_accepts_a_min_equal_to_the_gpus_lent_at_once(
    lab: Quota, operator: Any, api_as: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        response = _patch(api_as, operator, lab, 4000)
    assert response.status_code == 200, response.content
    lab.refresh_from_db()
    assert lab.gpu_min_gpu_milli == 4000


def test_loans_over_or_declined_do_not_hold_the_min(lab: Quota, operator: Any, api_as: Any) -> None:
    with time_machine.travel(NOW + timedelta(days=3, hours=1), tick=False):
        declined = loans.request_loan(
            borrower=QuotaLoan.objects.first().borrower,  # type: ignore[union-attr]
            lender=lab,
            gpus=4,
            starts_at=NOW + timedelta(days=4),
            ends_at=NOW + timedelta(days=6),
            reason="more",
            actor=operator,
        )
        loans.decide_loan(declined, approve=False, actor=operator, expected_version=1)
        # day 3: team-b's loan is over, team-a's 3 GPUs run until day 5
        assert _patch(api_as, operator, lab, 2000).status_code == 400
        assert _patch(api_as, operator, lab, 3000).status_code == 200


def test_the_quota_form_shows_the_refusal_on_the_min_field(
    lab: Quota, operator: Any, client: Any
) -> None:
    client.force_login(operator)
    with time_machine.travel(NOW, tick=False):
        response = client.post(f"/quotas/{lab.pk}/edit/", _form_data(lab, gpu_min_gpu_milli=3000))
    assert response.status_code == 200
    assert response.context["form"].errors == {"gpu_min_gpu_milli": [REFUSAL]}
    lab.refresh_from_db()
    assert lab.gpu_min_gpu_milli == 8000
