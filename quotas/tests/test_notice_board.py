"""The reclaim-notices board (issue 17, polite reclaim): who sees which notices across groups, in which
order, filtered how, with which live totals; the page, the API and their refusals of bad filters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine

from portal.tests.factories import MembershipFactory, TenantFactory, UserFactory
from quotas.models import DeliveryState, ReclaimNotice, ReclaimNoticeState
from quotas.notice_board import BoardState, board_page, board_query, board_summary
from quotas.tests.factories import QuotaFactory, QuotaGroupFactory, make_workload

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def _notice(quota: Any, claimant: Any, name: str, workload_id: int, **fields: Any) -> Any:
    defaults: dict[str, Any] = {
        "noticed_at": NOW - timedelta(minutes=30),
        "deadline": NOW + timedelta(seconds=300),
        "reason": f"{claimant.name if claimant else 'a team'} needs its guaranteed min",
    }
    defaults.update(fields)
    return ReclaimNotice.objects.create(
        group=quota.group, quota=quota, claimant_quota=claimant, workload_id=workload_id,
        workload_name=name, workload_kind="job_pod", owner_username="alice", victim_name=name,
        **defaults,
    )  # fmt: skip


@pytest.fixture
def board(team_a: Any, team_b: Any) -> dict[str, Any]:
    """Two groups, three teams. training: team-a's work noticed for team-b (one live at +300 s on
    0.5 GPU, one live at +60 s on 2 GPUs, one executed 100 s ago). inference: team-b's work noticed
    for team-c (live at +120 s, cancelled 10 s ago) and team-c's own (live at +30 s, hook failed)."""
    team_c = TenantFactory(slug="team-c", name="Team C")
    training = QuotaGroupFactory(name="training")
    inference = QuotaGroupFactory(name="inference")
    a = QuotaFactory(group=training, tenant=team_a, name="team-a")
    b = QuotaFactory(group=training, tenant=team_b, name="team-b")
    b_inf = QuotaFactory(group=inference, tenant=team_b, name="team-b-inf")
    c_inf = QuotaFactory(group=inference, tenant=team_c, name="team-c-inf")
    half = make_workload(a, name="train-half", gpu_count=1, gpu_milli=500)
    two = make_workload(a, name="train-two", gpu_count=2, gpu_milli=1000)
    n1 = _notice(a, b, "train-half", half.pk, deadline=NOW + timedelta(seconds=300))
    n2 = _notice(a, b, "train-two", two.pk, deadline=NOW + timedelta(seconds=60))
    n3 = _notice(b_inf, c_inf, "serve-0", 9003, deadline=NOW + timedelta(seconds=120))
    n4 = _notice(
        a, b, "train-old", 9004, deadline=NOW - timedelta(seconds=200),
        state=ReclaimNoticeState.EXECUTED, closed_at=NOW - timedelta(seconds=100),
        close_note="stopped at the deadline",
    )  # fmt: skip
    n5 = _notice(
        b_inf, c_inf, "serve-old", 9005, deadline=NOW + timedelta(seconds=20),
        state=ReclaimNoticeState.CANCELLED, closed_at=NOW - timedelta(seconds=10),
        close_note="no longer needed", signal_state=DeliveryState.FAILED,
    )  # fmt: skip
    n6 = _notice(
        c_inf, None, "batch-c", 9006, deadline=NOW + timedelta(seconds=30),
        hook_state=DeliveryState.FAILED, hook_detail="connection refused",
    )  # fmt: skip
    return {
        "training": training, "inference": inference, "a": a, "b": b, "b_inf": b_inf,
        "c_inf": c_inf, "n": {1: n1, 2: n2, 3: n3, 4: n4, 5: n5, 6: n6},
    }  # fmt: skip


def _ids(board: dict[str, Any], rows: list[dict[str, Any]]) -> list[int]:
    """The rows as fixture notice numbers (1-6)."""
    number = {notice.pk: key for key, notice in board["n"].items()}
    return [number[row["id"]] for row in rows]


def _page(board: dict[str, Any], viewer: Any, **filters: Any) -> list[int]:
    with time_machine.travel(NOW, tick=False):
        return _ids(board, board_page(viewer, board_query(viewer, **filters)).rows)


# --------------------------------------------------------------------------------- visibility


def test_operators_see_every_groups_notices_live_by_deadline_then_newest_closed(
    board: dict[str, Any], operator: Any
) -> None:
    assert _page(board, operator) == [6, 2, 3, 1, 5, 4]


def test_a_member_sees_only_the_notices_of_their_teams_quotas(
    board: dict[str, Any], bob: Any, charlie: Any
) -> None:
    # team-a's work noticed for team-b
    assert _page(board, bob) == [2, 1, 4]
    # team-b: claimant of every training notice, noticed in inference; not team-c's own notice
    assert _page(board, charlie) == [2, 3, 1, 5, 4]


def test_someone_in_no_team_sees_no_notice(board: dict[str, Any]) -> None:
    outsider = UserFactory(username="mallory")
    assert _page(board, outsider) == []


def test_a_member_of_the_claimant_team_only_sees_the_notices_of_its_own_quota(
    board: dict[str, Any],
) -> None:
    carol = UserFactory(username="carol")
    MembershipFactory(user=carol, tenant=board["c_inf"].tenant)
    assert _page(board, carol) == [6, 3, 5]


# ------------------------------------------------------------------------------ filters, order


@pytest.mark.parametrize(
    ("_case", "filters", "expected"),
    [
        ("live only", {"state": "live"}, [6, 2, 3, 1]),
        ("closed only", {"state": "closed"}, [5, 4]),
        ("all", {"state": "all"}, [6, 2, 3, 1, 5, 4]),
        ("group by name", {"group": "inference"}, [6, 3, 5]),
        ("group by id", {"group": "training-id"}, [2, 1, 4]),
        ("quota: its own and claimed", {"quota": "b"}, [2, 1, 4]),
        ("quota and state", {"quota": "b_inf", "state": "closed"}, [5]),
        ("limit", {"limit": "2"}, [6, 2]),
    ],
)
def test_the_filters_narrow_the_board_and_keep_its_order(
    board: dict[str, Any], operator: Any, _case: str, filters: dict[str, str], expected: list[int]
) -> None:
    if filters.get("group") == "training-id":
        filters = {**filters, "group": str(board["training"].pk)}
    if "quota" in filters:
        filters = {**filters, "quota": str(board[filters["quota"]].pk)}
    assert _page(board, operator, **filters) == expected


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 8])
def test_next_walks_the_whole_board_once_in_order_and_previous_walks_it_back(
    board: dict[str, Any], operator: Any, limit: int
) -> None:
    for number, seconds_ago in ((7, 50), (8, 500)):  # more closed ones, either side of notice 4
        board["n"][number] = _notice(
            board["c_inf"], None, f"old-{number}", 9000 + number,
            deadline=NOW - timedelta(seconds=seconds_ago), state=ReclaimNoticeState.CANCELLED,
            closed_at=NOW - timedelta(seconds=seconds_ago),
        )  # fmt: skip
    forward: list[list[int]] = []
    cursor = ""
    with time_machine.travel(NOW, tick=False):
        for _ in range(10):
            page = board_page(operator, board_query(operator, limit=limit, cursor=cursor))
            forward.append(_ids(board, page.rows))
            assert (page.previous_position is None) == (cursor == "")
            if page.next_position is None:
                break
            cursor = page.next_position.encode()
        backward = [forward[-1]]
        while page.previous_position is not None and len(backward) < 10:
            cursor = page.previous_position.encode()
            page = board_page(operator, board_query(operator, limit=limit, cursor=cursor))
            backward.append(_ids(board, page.rows))
    assert [n for rows in forward for n in rows] == [6, 2, 3, 1, 5, 7, 4, 8]
    assert all(len(rows) == limit for rows in forward[:-1])
    assert list(reversed(backward)) == forward


@pytest.mark.parametrize(
    ("_case", "filters", "field"),
    [
        ("unknown state", {"state": "soon"}, "state"),
        ("unknown group", {"group": "nowhere"}, "group"),
        ("unknown group id", {"group": "999999"}, "group"),
        ("quota not a number", {"quota": "team-a"}, "quota"),
        ("unknown quota", {"quota": "999999"}, "quota"),
        ("limit zero", {"limit": "0"}, "limit"),
        ("limit too big", {"limit": "501"}, "limit"),
        ("limit not a number", {"limit": "ten"}, "limit"),
        ("forged cursor", {"cursor": "bm90LWEtY3Vyc29y"}, "cursor"),
        ("overlong group", {"group": "g" * 101}, "group"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(
    board: dict[str, Any], operator: Any, _case: str, filters: dict[str, str], field: str
) -> None:
    from portal.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        board_query(operator, **filters)
    assert list(refused.value.fields) == [field]


def test_a_member_cannot_filter_by_a_group_or_quota_of_other_teams(
    board: dict[str, Any], bob: Any
) -> None:
    from portal.errors import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        board_query(bob, group="inference", quota=str(board["c_inf"].pk))
    assert sorted(refused.value.fields) == ["group", "quota"]
    assert board_query(bob, group="training").state == BoardState.ALL


def test_the_summary_counts_live_notices_workloads_gpus_deadline_and_failures_per_group(
    board: dict[str, Any], operator: Any, bob: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        summary = board_summary(operator, board_query(operator, state="closed")).as_json()
        mine = board_summary(bob, board_query(bob)).as_json()
    assert [
        (g["group"], g["live_notices"], g["workloads"], g["gpus"], g["seconds_left"],
         g["delivery_failures"])
        for g in summary["groups"]
    ] == [("inference", 2, 2, 0.0, 30, 1), ("training", 2, 2, 2.5, 60, 0)]  # fmt: skip
    assert (
        summary["live_notices"], summary["workloads"], summary["gpus"],
        summary["soonest_deadline"], summary["delivery_failures"],
    ) == (4, 4, 2.5, NOW + timedelta(seconds=30), 1)  # fmt: skip
    assert (mine["live_notices"], mine["gpus"], [g["group"] for g in mine["groups"]]) == (
        2, 2.5, ["training"],
    )  # fmt: skip


# ---------------------------------------------------------------------------------------- page


def test_the_board_page_shows_every_notice_to_an_operator_with_its_plan(
    board: dict[str, Any], client: Any, operator: Any
) -> None:
    client.force_login(operator)
    with time_machine.travel(NOW, tick=False):
        response = client.get("/quotas/reclaim-notices/")
        index = client.get("/quotas/")
        group = client.get(f"/quotas/groups/{board['training'].pk}/")
    assert response.status_code == 200
    html = response.content.decode()
    rows = [html.index(f'data-testid="notice-{board["n"][k].pk}"') for k in (6, 2, 3, 1, 5, 4)]
    assert rows == sorted(rows)  # live by deadline, then closed newest first
    assert "train-two" in html
    assert "team-a → team-b" in html
    assert "(in 60 s)" in html
    assert "stopped at the deadline" in html
    assert "connection refused" in html
    assert "4 live notices: 4 workloads, 2.5 GPUs" in html
    assert 'href="/quotas/reclaim-notices/"' in index.content.decode()
    assert 'href="/quotas/reclaim-notices/?group=training"' in group.content.decode()


def test_the_board_page_shows_a_member_their_teams_notices_only(
    board: dict[str, Any], client: Any, bob: Any
) -> None:
    client.force_login(bob)
    with time_machine.travel(NOW, tick=False):
        html = client.get("/quotas/reclaim-notices/").content.decode()
    assert "train-two" in html
    assert "train-old" in html
    assert "batch-c" not in html
    assert "serve-0" not in html


@pytest.mark.parametrize(
    ("_case", "query", "field"),
    [
        ("unknown state", "state=soon", "state"),
        ("unknown group", "group=nowhere", "group"),
        ("limit too big", "limit=9999", "limit"),
        ("bad quota", "quota=abc", "quota"),
    ],
)
def test_the_board_page_shows_a_bad_filter_as_a_form_error_and_no_rows(
    board: dict[str, Any], client: Any, operator: Any, _case: str, query: str, field: str
) -> None:
    client.force_login(operator)
    response = client.get(f"/quotas/reclaim-notices/?{query}")
    assert response.status_code == 400
    html = response.content.decode()
    assert f'data-testid="error-{field}"' in html
    assert 'data-testid="notices"' not in html


def test_the_board_page_pages_with_a_next_link(
    board: dict[str, Any], client: Any, operator: Any
) -> None:
    client.force_login(operator)
    with time_machine.travel(NOW, tick=False):
        first = client.get("/quotas/reclaim-notices/?limit=4&state=all")
        html = first.content.decode()
        link = html.split('data-testid="next-page"')[0].rsplit('href="', 1)[1].split('"')[0]
        second = client.get("/quotas/reclaim-notices/" + link.replace("&amp;", "&"))
    assert f'data-testid="notice-{board["n"][1].pk}"' in html
    assert f'data-testid="notice-{board["n"][5].pk}"' not in html
    second_html = second.content.decode()
    assert second.status_code == 200
    assert 'data-testid="previous-page"' in second_html
    assert 'data-testid="previous-page"' not in html
    assert [k for k in (6, 2, 3, 1, 5, 4) if f'"notice-{board["n"][k].pk}"' in second_html] == [
        5, 4,
    ]  # fmt: skip


# ----------------------------------------------------------------------------------------- API


def test_the_api_lists_the_board_in_pages_with_the_notice_body(
    board: dict[str, Any], api_as: Any, operator: Any
) -> None:
    client = api_as(operator)
    with time_machine.travel(NOW, tick=False):
        first = client.get("/api/v1/reclaim-notices/?limit=4")
        second = client.get(first.json()["next"])
        back = client.get(second.json()["previous"])
    assert first.status_code == 200
    body = first.json()
    assert _ids(board, body["results"]) == [6, 2, 3, 1]
    assert body["previous"] is None
    assert _ids(board, second.json()["results"]) == [5, 4]
    assert second.json()["next"] is None
    assert (_ids(board, back.json()["results"]), back.json()["previous"]) == ([6, 2, 3, 1], None)
    row = body["results"][1]
    assert (row["workload"], row["quota"], row["claimant_quota"], row["seconds_left"]) == (
        "train-two", "team-a", "team-b", 60,
    )  # fmt: skip
    assert (body["results"][0]["hook_state"], body["results"][0]["hook_detail"]) == (
        "failed", "connection refused",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("_case", "who", "query", "expected"),
    [
        ("operator", "operator", "", [6, 2, 3, 1, 5, 4]),
        ("team admin", "alice", "", [2, 1, 4]),
        ("member", "bob", "?state=live", [2, 1]),
        ("other team", "charlie", "", [2, 3, 1, 5, 4]),
    ],
)
def test_the_api_shows_each_persona_only_what_concerns_them(
    board: dict[str, Any], api_as: Any, request: Any, _case: str, who: str, query: str,
    expected: list[int],
) -> None:  # fmt: skip
    user = request.getfixturevalue(who)
    response = api_as(user).get(f"/api/v1/reclaim-notices/{query}")
    assert response.status_code == 200
    assert _ids(board, response.json()["results"]) == expected


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=soon", "state"),
        ("group=nowhere", "group"),
        ("quota=-1", "quota"),
        ("limit=0", "limit"),
        ("cursor=%%%", "cursor"),
    ],
)
def test_the_api_answers_400_naming_the_bad_filter(
    board: dict[str, Any], api_as: Any, operator: Any, query: str, field: str
) -> None:
    response = api_as(operator).get(f"/api/v1/reclaim-notices/?{query}")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]
    summary = api_as(operator).get(f"/api/v1/reclaim-notices/summary/?{query}")
    expected_summary = 200 if field in ("limit", "cursor") else 400  # paging does not apply
    assert summary.status_code == expected_summary


def test_the_api_summary_gives_the_live_totals_per_group(
    board: dict[str, Any], api_as: Any, operator: Any
) -> None:
    with time_machine.travel(NOW, tick=False):
        response = api_as(operator).get("/api/v1/reclaim-notices/summary/?group=training")
    assert response.status_code == 200
    body = response.json()
    assert (body["live_notices"], body["workloads"], body["gpus"], body["seconds_left"]) == (
        2, 2, 2.5, 60,
    )  # fmt: skip
    assert [g["group"] for g in body["groups"]] == ["training"]


def test_the_api_list_reads_the_same_few_queries_whatever_the_rows(
    board: dict[str, Any], api_as: Any, operator: Any, django_assert_num_queries: Any
) -> None:
    client = api_as(operator)
    client.get("/api/v1/reclaim-notices/")  # warm the token and the session
    with django_assert_num_queries(4):  # two segments (live, closed), select_related
        response = client.get("/api/v1/reclaim-notices/")
    assert len(response.json()["results"]) == 6
