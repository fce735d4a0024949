"""Idempotency-Key on every API POST (issue 7): retries return the first response, create nothing new."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from portal.api.tasks import prune_api_records_task
from portal.models import ApiToken, IdempotencyRecord
from portal.services import issue_token

TOKENS_URL = "/api/v1/tokens/"


def _post(client: Any, body: dict[str, Any], key: str | None, url: str = TOKENS_URL) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


@pytest.mark.django_db
def test_retry_with_same_key_returns_first_response_and_creates_nothing(
    alice: Any, api_as: Any
) -> None:
    # given alice's client (its own token is 1 row)
    client = api_as(alice)
    # when the same POST is sent twice with the same key
    first = _post(client, {"name": "ci"}, "key-1")
    second = _post(client, {"name": "ci"}, "key-1")
    # then one token was created and the retry got the first response byte for byte
    assert first.status_code == 201
    assert second.status_code == 201
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"
    assert first.has_header("Idempotent-Replayed") is False
    assert second["Content-Type"] == first["Content-Type"]
    assert ApiToken.objects.filter(user=alice, name="ci").count() == 1
    assert IdempotencyRecord.objects.get().state == IdempotencyRecord.STATE_COMPLETED


@pytest.mark.django_db
def test_json_key_order_does_not_change_the_fingerprint(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    first = client.post(
        TOKENS_URL,
        data='{"name": "ci", "expires_at": null}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    second = client.post(
        TOKENS_URL,
        data='{"expires_at":null,"name":"ci"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert (first.status_code, second.status_code) == (201, 201)
    assert second.content == first.content
    assert ApiToken.objects.filter(name="ci").count() == 1


@pytest.mark.django_db
def test_same_key_with_another_body_is_refused_with_422(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "key-1").status_code == 201
    response = _post(client, {"name": "other"}, "key-1")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert response.json()["error"]["fields"] == {
        "Idempotency-Key": [response.json()["error"]["message"]]
    }
    assert ApiToken.objects.filter(name="other").exists() is False


@pytest.mark.django_db
def test_keys_are_scoped_per_token_and_per_path(alice: Any, bob: Any, api_as: Any) -> None:
    alice_client, bob_client = api_as(alice), api_as(bob)
    assert _post(alice_client, {"name": "ci"}, "shared").status_code == 201
    # another caller with the same key runs its own request
    assert _post(bob_client, {"name": "ci"}, "shared").status_code == 201
    # another token of the same user is another scope too
    assert _post(api_as(alice), {"name": "ci"}, "shared").status_code == 201
    assert ApiToken.objects.filter(name="ci").count() == 3


@pytest.mark.django_db
def test_without_a_key_every_post_runs(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, None).status_code == 201
    assert _post(client, {"name": "ci"}, None).status_code == 201
    assert ApiToken.objects.filter(name="ci").count() == 2
    assert IdempotencyRecord.objects.exists() is False


@pytest.mark.django_db
def test_validation_errors_are_replayed_too(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    first = _post(client, {"name": ""}, "bad")
    second = _post(client, {"name": ""}, "bad")
    assert (first.status_code, second.status_code) == (400, 400)
    assert second.content == first.content
    assert second["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_unauthenticated_and_rate_limited_responses_are_not_kept(alice: Any, api_as: Any) -> None:
    # an invalid token is answered 401 and leaves no record behind
    client = api_as(alice)
    bad = type(client)()
    bad.credentials(HTTP_AUTHORIZATION="Bearer tsr_nothing_wrong")
    assert _post(bad, {"name": "ci"}, "k").status_code == 401
    assert IdempotencyRecord.objects.exists() is False
    # a 429 is not kept either: the retry in the next window runs
    with override_settings(TESSERA_API_RATE_PER_TOKEN=1):
        assert client.get("/api/v1/me/").status_code == 200
        limited = _post(client, {"name": "ci"}, "k")
    assert limited.status_code == 429
    assert IdempotencyRecord.objects.exists() is False


@pytest.mark.django_db
def test_malformed_key_is_a_400(alice: Any, api_as: Any) -> None:
    response = _post(api_as(alice), {"name": "ci"}, "x" * 256)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert ApiToken.objects.filter(name="ci").exists() is False


@pytest.mark.django_db
def test_in_progress_claim_answers_409_with_retry_after(alice: Any, api_as: Any) -> None:
    # given a claim of the same key by a request that is still running (fingerprint of this body)
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    IdempotencyRecord.objects.update(state=IdempotencyRecord.STATE_IN_PROGRESS)
    # when a duplicate arrives
    response = _post(client, {"name": "ci"}, "k")
    # then it is told to come back, and nothing new is created
    assert response.status_code == 409
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "idempotency_in_progress"
    assert ApiToken.objects.filter(name="ci").count() == 1


@pytest.mark.django_db
def test_abandoned_claim_is_taken_over_after_the_lock_time(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    IdempotencyRecord.objects.update(
        state=IdempotencyRecord.STATE_IN_PROGRESS,
        created_at=timezone.now() - timedelta(seconds=301),
    )
    response = _post(client, {"name": "ci"}, "k")
    assert response.status_code == 201
    assert response.has_header("Idempotent-Replayed") is False
    assert IdempotencyRecord.objects.get().state == IdempotencyRecord.STATE_COMPLETED


@pytest.mark.django_db
def test_expired_records_are_pruned_and_the_key_can_be_reused(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert prune_api_records_task.delay().get() == {
        "idempotency_records": 1,
        "rate_limit_counters": 0,
    }
    assert IdempotencyRecord.objects.exists() is False
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    assert ApiToken.objects.filter(name="ci").count() == 2


@pytest.mark.django_db
def test_expired_but_unpruned_record_is_a_fresh_claim(alice: Any, api_as: Any) -> None:
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    IdempotencyRecord.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _post(client, {"name": "other"}, "k")
    assert response.status_code == 201
    assert ApiToken.objects.filter(name="other").count() == 1


@pytest.mark.django_db
def test_session_callers_are_scoped_by_user(alice: Any, client: Any) -> None:
    client.force_login(alice)
    first = _post(client, {"name": "web"}, "k")
    second = _post(client, {"name": "web"}, "k")
    assert (first.status_code, second.status_code) == (201, 201)
    assert ApiToken.objects.filter(name="web").count() == 1
    assert IdempotencyRecord.objects.get().scope == f"user:{alice.pk}"


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_identical_posts_create_exactly_one_object(
    live_server: Any, alice: Any
) -> None:
    """Issue 7: 20 identical POSTs with one Idempotency-Key, sent at once from 20 threads."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: SQLite serialises writers, so the race cannot happen there")
    raw = issue_token(alice, name="client").raw
    barrier = threading.Barrier(20)
    results: list[tuple[int, bytes, dict[str, str]]] = []
    lock = threading.Lock()

    def send() -> None:
        barrier.wait()
        response = requests.post(
            f"{live_server.url}{TOKENS_URL}",
            json={"name": "concurrent"},
            headers={"Authorization": f"Bearer {raw}", "Idempotency-Key": "same-key"},
            timeout=30,
        )
        with lock:
            results.append((response.status_code, response.content, dict(response.headers)))

    threads = [threading.Thread(target=send) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 20
    assert ApiToken.objects.filter(name="concurrent").count() == 1
    statuses = sorted(status for status, _, _ in results)
    assert set(statuses) <= {201, 409}
    assert statuses.count(201) >= 1
    created = [body for status, body, _ in results if status == 201]
    assert len(set(created)) == 1  # every 201 (first or replay) is the same response
    for status, body, headers in results:
        if status == 409:
            assert json.loads(body)["error"]["code"] == "idempotency_in_progress"
            assert headers["Retry-After"] == "1"
    # and a retry after the dust settles gets the first response
    retry = requests.post(
        f"{live_server.url}{TOKENS_URL}",
        json={"name": "concurrent"},
        headers={"Authorization": f"Bearer {raw}", "Idempotency-Key": "same-key"},
        timeout=30,
    )
    assert retry.status_code == 201
    assert retry.content == created[0]
    assert ApiToken.objects.filter(name="concurrent").count() == 1


@pytest.mark.django_db
def test_json_with_a_lone_surrogate_is_a_400_not_a_500(alice: Any, api_as: Any) -> None:
    response = api_as(alice).post(
        TOKENS_URL, data='{"name": "x\\ud901"}', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
    assert ApiToken.objects.filter(name__startswith="x").exists() is False


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_claim_is_one_statement_that_stores_and_replays(
    alice: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    """Outside any transaction (as in production) PostgreSQL claims with one INSERT ... ON CONFLICT DO
    NOTHING statement; the claim row is the one the response is stored in and replayed from, and the
    statement's asynchronous commit does not leak into the connection's later transactions."""
    if connection.vendor != "postgresql":
        pytest.skip("the one-statement claim is PostgreSQL's")
    client = api_as(alice)
    client.get("/api/v1/me/")  # the token's last-used write happens once a minute
    # the claim (one statement; it was BEGIN, SET LOCAL, INSERT, COMMIT) sent together with the token
    # lookup (with memberships), rate upsert, the view's own transaction (BEGIN, INSERT, COMMIT),
    # storing the response
    with django_assert_num_queries(7) as ctx:
        first = _post(client, {"name": "ci"}, "one")
    assert first.status_code == 201
    sqls = [query["sql"] for query in ctx.captured_queries]
    assert "ON CONFLICT (scope, method, path, key) DO NOTHING" in sqls[0]
    # authentication read the lookup's rows instead of querying again
    token_lookups = [i for i, sql in enumerate(sqls) if 'FROM "portal_apitoken"' in sql]
    assert token_lookups == [1]
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.status_code, bytes(record.response_body)) == (
        IdempotencyRecord.STATE_COMPLETED,
        201,
        first.content,
    )
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    replay = _post(client, {"name": "ci"}, "one")
    assert (replay.status_code, replay.content, replay["Idempotent-Replayed"]) == (
        201,
        first.content,
        "true",
    )
    assert _post(client, {"name": "other"}, "one").status_code == 422
    assert ApiToken.objects.filter(name="ci").count() == 1


def _commit_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_a_claimed_request_flushes_its_commits_once_with_the_stored_answer() -> None:
    """The view's commits do not wait for the WAL flush; the stored answer's commit waits for all of
    them (WAL is ordered). Every way out leaves the session in its configured commit mode."""
    if connection.vendor != "postgresql":
        pytest.skip("commit modes are PostgreSQL's")
    from django.http import HttpRequest, JsonResponse
    from django.test import RequestFactory

    from portal.api.idempotency import IdempotencyMiddleware

    seen: list[str] = []

    def view(request: HttpRequest) -> JsonResponse:
        seen.append(_commit_mode())
        return JsonResponse({"ok": True}, status=201)

    def failing(request: HttpRequest) -> JsonResponse:
        raise RuntimeError("boom")

    def post(key: str) -> HttpRequest:
        return RequestFactory().post(
            "/api/v1/things/",
            data=b"{}",
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=key,
            HTTP_AUTHORIZATION="Bearer tsr_abc_def",
        )

    assert IdempotencyMiddleware(view)(post("one")).status_code == 201
    assert seen == ["off"]  # the view ran with the flush deferred to the stored answer
    assert _commit_mode() == "on"
    stored = IdempotencyRecord.objects.get(key="one")
    assert stored.state == IdempotencyRecord.STATE_COMPLETED
    replay = IdempotencyMiddleware(view)(post("one"))  # the key is taken: no view, no store
    assert replay["Idempotent-Replayed"] == "true"
    assert seen == ["off"]
    assert _commit_mode() == "on"
    with pytest.raises(RuntimeError, match="boom"):
        IdempotencyMiddleware(failing)(post("two"))
    assert _commit_mode() == "on"
    assert not IdempotencyRecord.objects.filter(key="two").exists()
