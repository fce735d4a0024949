"""Idempotency-Key on every API POST (issue 7): retries return the first response, create nothing new."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest
import requests
from django.contrib.auth.models import User
from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.test import RequestFactory, override_settings
from django.utils import timezone

from codespaces.models import Codespace
from portal.api.idempotency import IdempotencyMiddleware, lock_key
from portal.api.tasks import prune_api_records_task
from portal.models import ApiToken, IdempotencyRecord, hash_token
from portal.services import issue_token
from portal.tests.factories import UserFactory
from portal.tests.locks import terminate_own_session

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
    # an expiry within the maximum (null, never expiring, is for operators only)
    later = (timezone.now() + timedelta(days=30)).isoformat()
    first = client.post(
        TOKENS_URL,
        data=f'{{"name": "ci", "expires_at": "{later}"}}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    second = client.post(
        TOKENS_URL,
        data=f'{{"expires_at":"{later}","name":"ci"}}',
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
def test_a_duplicate_of_a_request_still_running_answers_409_with_retry_after(
    alice: Any, api_as: Any
) -> None:
    """The first request holds the key's lock in its live transaction (here: another session)."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serialises the duplicates in BEGIN IMMEDIATE instead")
    client = api_as(alice)
    token = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    lookup = {"scope": f"token:{hash_token(token)}", "method": "POST", "path": TOKENS_URL}
    key = lock_key({**lookup, "key": "k"})
    settings = connection.settings_dict
    with psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"],
        host=settings["HOST"],
        port=settings["PORT"] or 5432,
        autocommit=True,
    ) as first_request:
        first_request.execute("SELECT pg_advisory_lock(%s)", [key])
        # when a duplicate arrives while the first one runs
        response = _post(client, {"name": "ci"}, "k")
        # then it is told to come back, and nothing is created
        assert response.status_code == 409
        assert response["Retry-After"] == "1"
        assert response.json()["error"]["code"] == "idempotency_in_progress"
        assert ApiToken.objects.filter(name="ci").count() == 0
        # another key is not held up
        assert _post(client, {"name": "other"}, "k2").status_code == 201
        first_request.execute("SELECT pg_advisory_unlock(%s)", [key])
    assert _post(client, {"name": "ci"}, "k").status_code == 201


@pytest.mark.django_db
def test_a_claim_left_without_an_answer_is_taken_over_at_once(alice: Any, api_as: Any) -> None:
    """A row without an answer (left by a process that died, under the earlier claim-first design)
    has no live owner: the key's lock is free, so the retry runs at once instead of waiting 300 s."""
    client = api_as(alice)
    assert _post(client, {"name": "ci"}, "k").status_code == 201
    ApiToken.objects.filter(name="ci").delete()
    IdempotencyRecord.objects.update(state=IdempotencyRecord.STATE_IN_PROGRESS)
    response = _post(client, {"name": "ci"}, "k")
    assert response.status_code == 201
    assert response.has_header("Idempotent-Replayed") is False
    assert IdempotencyRecord.objects.get().state == IdempotencyRecord.STATE_COMPLETED
    assert ApiToken.objects.filter(name="ci").count() == 1


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
def test_outside_a_transaction_the_request_and_its_answer_are_one_transaction(
    alice: Any, api_as: Any, django_assert_num_queries: Any
) -> None:
    """Outside any transaction (as in production) PostgreSQL runs the key's lock, the record's read
    and the token lookup first, in one round trip; the view's writes and the answer's INSERT follow
    in the same transaction, whose one COMMIT is the last statement."""
    if connection.vendor != "postgresql":
        pytest.skip("the advisory lock is PostgreSQL's")
    client = api_as(alice)
    client.get("/api/v1/me/")  # the token's last-used write happens once a minute
    # BEGIN, lock, record, token lookup (with memberships), rate upsert, the view's savepoint with
    # the parent token's row lock (a token minted through a token is locked against its revocation,
    # issue 38 defect 3) and its INSERT, the answer's INSERT, COMMIT
    with django_assert_num_queries(11) as ctx:
        first = _post(client, {"name": "ci"}, "one")
    assert first.status_code == 201
    sqls = [query["sql"] for query in ctx.captured_queries]
    assert sqls[0] == "BEGIN"
    assert sqls[1].startswith("SELECT pg_try_advisory_xact_lock(")
    assert 'FROM "portal_idempotencyrecord"' in sqls[2]
    # authentication read the lookup's rows instead of querying again
    token_lookups = [
        i
        for i, sql in enumerate(sqls)
        if 'FROM "portal_apitoken"' in sql and "FOR UPDATE" not in sql
    ]
    assert token_lookups == [3]
    assert sum('FROM "portal_apitoken"' in sql and "FOR UPDATE" in sql for sql in sqls) == 1
    assert sqls[-2].startswith('INSERT INTO "portal_idempotencyrecord"')
    assert (sqls.count("BEGIN"), sqls.count("COMMIT"), sqls[-1]) == (1, 1, "COMMIT")
    record = IdempotencyRecord.objects.get()
    assert (record.state, record.status_code, bytes(record.response_body)) == (
        IdempotencyRecord.STATE_COMPLETED,
        201,
        first.content,
    )
    assert not connection.in_atomic_block
    replay = _post(client, {"name": "ci"}, "one")
    assert (replay.status_code, replay.content, replay["Idempotent-Replayed"]) == (
        201,
        first.content,
        "true",
    )
    assert _post(client, {"name": "other"}, "one").status_code == 422
    assert ApiToken.objects.filter(name="ci").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_view_that_fails_leaves_neither_its_writes_nor_an_answer() -> None:
    """The view's writes and the stored answer commit together: a 5xx or an exception rolls back
    both, a stored answer comes with the view's writes."""

    def creating(status: int) -> Any:
        def view(request: HttpRequest) -> JsonResponse:
            UserFactory(username=f"made-{status}")
            return JsonResponse({"ok": True}, status=status)

        return view

    def failing(request: HttpRequest) -> JsonResponse:
        UserFactory(username="made-then-raised")
        raise RuntimeError("boom")

    def post(key: str) -> HttpRequest:
        return RequestFactory().post(
            "/api/v1/things/",
            data=b"{}",
            content_type="application/json",
            HTTP_IDEMPOTENCY_KEY=key,
            HTTP_AUTHORIZATION="Bearer tsr_abc_def",
        )

    assert IdempotencyMiddleware(creating(201))(post("one")).status_code == 201
    assert IdempotencyRecord.objects.get(key="one").status_code == 201
    assert User.objects.filter(username="made-201").exists()
    assert IdempotencyMiddleware(creating(503))(post("two")).status_code == 503
    assert not IdempotencyRecord.objects.filter(key="two").exists()
    assert not User.objects.filter(username="made-503").exists()
    with pytest.raises(RuntimeError, match="boom"):
        IdempotencyMiddleware(failing)(post("three"))
    assert not IdempotencyRecord.objects.filter(key="three").exists()
    assert not User.objects.filter(username="made-then-raised").exists()
    assert not connection.in_atomic_block


# --- A request killed mid-way (issue item 7) ---------------------------------------------------------

CODESPACES_URL = "/api/v1/codespaces/"
ONE_CPU_CODESPACE = {
    "template": "pytorch",
    "gpu_mode": "none",
    "cpu_milli": 1000,
    "memory_mib": 2048,
    "name": "nb1",
}


class ProcessKilled(BaseException):
    """Stands for the worker process dying: nothing in the process catches it (not an Exception)."""


def _create_codespace(client: Any) -> Any:
    return client.post(
        CODESPACES_URL, ONE_CPU_CODESPACE, format="json", HTTP_IDEMPOTENCY_KEY="create-nb1"
    )


@pytest.fixture
def one_codespace_per_user(template: Any, quota_a: Any) -> Any:
    """The pytorch template allows one codespace per user: a create that ran twice is refused."""
    template.max_per_user = 1
    template.save(update_fields=["max_per_user"])
    return template


def _die(*args: Any, **kwargs: Any) -> None:
    raise ProcessKilled


@pytest.mark.django_db
def test_a_request_killed_before_its_answer_was_stored_leaves_nothing_and_the_retry_creates_once(
    bob: Any, api_as: Any, one_codespace_per_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a create that dies after the codespace's INSERT, before its answer is stored
    client = api_as(bob)
    with monkeypatch.context() as patched:
        patched.setattr("portal.api.idempotency._store", _die)
        with pytest.raises(ProcessKilled):
            _create_codespace(client)
    # then nothing of it is left (the object and the answer commit together, or neither does)
    assert Codespace.objects.filter(name="nb1").count() == 0
    # and the retry runs against that clean state: the codespace, not "limit reached" or 409
    retry = _create_codespace(client)
    assert retry.status_code == 201, retry.json()
    assert retry.json()["name"] == "nb1"
    assert Codespace.objects.filter(name="nb1").count() == 1
    again = _create_codespace(client)
    assert (again.status_code, again.content) == (201, retry.content)


@pytest.mark.django_db(transaction=True)
def test_a_request_killed_after_its_commit_is_answered_with_the_original_object_on_retry(
    bob: Any, api_as: Any, one_codespace_per_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a create that dies after its transaction committed, before the client got the answer
    # (the scheduling trigger runs after the commit)
    client = api_as(bob)
    with monkeypatch.context() as patched:
        patched.setattr("scheduling.tasks.run_cycle_task.apply_async", _die)
        with pytest.raises(ProcessKilled):
            _create_codespace(client)
    created = Codespace.objects.get(name="nb1")
    # when the client retries with the same key
    retry = _create_codespace(client)
    # then it gets the original object with its original status
    assert retry.status_code == 201, retry.json()
    assert retry.json()["id"] == created.pk
    assert retry["Idempotent-Replayed"] == "true"
    assert Codespace.objects.filter(name="nb1").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_request_whose_database_session_is_killed_mid_way_is_retried_at_once_against_a_clean_state(
    bob: Any, api_as: Any, one_codespace_per_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the server ends the session of a process that died (here: terminated by itself
    after the INSERT, before the answer), so the retry gets no 409 for a dead owner."""
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")

    def killed_session(*args: Any, **kwargs: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        raise ProcessKilled

    client = api_as(bob)
    with monkeypatch.context() as patched:
        patched.setattr("portal.api.idempotency._store", killed_session)
        with pytest.raises((ProcessKilled, DatabaseError)):
            _create_codespace(client)
    connection.close()
    assert Codespace.objects.filter(name="nb1").count() == 0
    retry = _create_codespace(client)
    assert retry.status_code == 201, retry.json()
    assert Codespace.objects.filter(name="nb1").count() == 1


@pytest.mark.django_db
def test_a_key_on_a_path_longer_than_a_record_holds_is_a_400(alice: Any, api_as: Any) -> None:
    response = _post(api_as(alice), {"name": "ci"}, "k", url="/api/v1/" + "x" * 600 + "/")
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["Idempotency-Key"]
    assert IdempotencyRecord.objects.exists() is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["in the view", "while storing the answer"])
def test_a_post_whose_database_session_is_ended_mid_request_is_answered_as_if_nothing_happened(
    where: str, bob: Any, api_as: Any, one_codespace_per_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chaos suite's 500: a session ended mid-request. The request was one transaction that
    died with the session, so the middleware runs it once more on a new connection: 201, created
    once (a second create would be refused: one codespace per user)."""
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL backend")
    import codespaces.api.views
    import portal.api.idempotency

    target = (
        (codespaces.api.views.services, "create_codespace")
        if where == "in the view"
        else (portal.api.idempotency, "_store")
    )
    original = getattr(*target)
    calls = []

    def ended_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            terminate_own_session()
        return original(*args, **kwargs)

    monkeypatch.setattr(*target, ended_once)
    client = api_as(bob)
    client.raise_request_exception = False
    response = _create_codespace(client)
    assert response.status_code == 201, response.content
    assert len(calls) == 2
    assert Codespace.objects.filter(name="nb1").count() == 1
    replay = _create_codespace(client)
    assert (replay.status_code, replay["Idempotent-Replayed"]) == (201, "true")
    assert replay.json()["id"] == response.json()["id"]
