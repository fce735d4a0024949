"""`portal.db`: reserved ids (alone, or with a row lock in the same statement), pipelined INSERTs,
transactions whose COMMIT travels with their last statements, INSERTs built once per model, and the
fast timestamp loader."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from portal.db import atomic_pipelined, insert, pipeline, reserve_id, reserve_ids
from portal.models import Tenant
from portal.tests.factories import TenantFactory

pytestmark = pytest.mark.django_db


def test_a_reserved_id_is_used_once_and_never_handed_out_again() -> None:
    reserved = reserve_id(Tenant)
    if connection.vendor != "postgresql":
        assert reserved is None  # no sequence: the INSERT assigns the id
        return
    assert reserved is not None
    Tenant.objects.create(pk=reserved, slug="reserved", name="Reserved")
    later = TenantFactory()
    assert later.pk > reserved
    assert reserve_id(Tenant) > later.pk


def test_ids_reserved_with_a_row_lock_come_in_one_statement_and_lock_the_row(
    django_assert_num_queries: Any,
) -> None:
    from django.contrib.auth import get_user_model

    from portal.models import IdempotencyRecord

    user = get_user_model().objects.create(username="locker")
    if connection.vendor != "postgresql":
        assert reserve_ids([Tenant, IdempotencyRecord], lock=user) is None
        return
    reserve_ids([Tenant, IdempotencyRecord])  # the sequences' names are looked up once per process
    with transaction.atomic(), django_assert_num_queries(1) as ctx:
        ids = reserve_ids([Tenant, IdempotencyRecord], lock=user)
    assert ids is not None
    assert len(ids) == 2
    assert "FOR UPDATE" in ctx.captured_queries[0]["sql"]
    tenant_id, _ = ids
    Tenant.objects.create(pk=tenant_id, slug="locked", name="Locked")
    assert TenantFactory().pk > tenant_id  # the sequence moved past the reserved id


def test_reserving_ids_under_the_lock_of_a_deleted_row_raises_does_not_exist() -> None:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    gone = user_model.objects.create(username="gone")
    user_model.objects.filter(pk=gone.pk).delete()
    if connection.vendor != "postgresql":
        assert reserve_ids([Tenant], lock=gone) is None
        return
    with pytest.raises(user_model.DoesNotExist):
        reserve_ids([Tenant], lock=gone)


def test_pipelined_inserts_are_written_and_a_clash_rolls_them_all_back() -> None:
    with transaction.atomic(), pipeline():
        first, second = Tenant(slug="p-one", name="One"), Tenant(slug="p-two", name="Two")
        ids = reserve_ids([Tenant, Tenant])
        first.pk, second.pk = ids if ids is not None else (None, None)
        insert(first)
        insert(second)
    assert set(Tenant.objects.values_list("slug", flat=True)) >= {"p-one", "p-two"}

    # a unique violation of a queued INSERT surfaces (at the latest when the block ends) as Django's
    # IntegrityError and takes the whole transaction with it
    def clash() -> None:
        with transaction.atomic(), pipeline():
            ids = reserve_ids([Tenant, Tenant])
            insert(Tenant(pk=ids[0] if ids else None, slug="p-three", name="Three"))
            insert(Tenant(pk=ids[1] if ids else None, slug="p-one", name="Clash"))

    with pytest.raises(IntegrityError):
        clash()
    assert not Tenant.objects.filter(slug="p-three").exists()


@pytest.mark.django_db(transaction=True)  # the test's own transaction would be the atomic block
def test_a_pipeline_outside_a_transaction_is_refused() -> None:
    if connection.vendor != "postgresql":
        with pipeline():  # a plain block elsewhere
            pass
        return
    with pytest.raises(RuntimeError, match="inside transaction.atomic"), pipeline():
        pass


def _psycopg_commits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The transaction status psycopg's own commit() finds each time Django calls it."""
    import psycopg
    from psycopg.pq import TransactionStatus

    seen: list[str] = []
    original = psycopg.Connection.commit

    def commit(self: Any) -> None:
        seen.append(TransactionStatus(self.pgconn.transaction_status).name)
        original(self)

    monkeypatch.setattr(psycopg.Connection, "commit", commit)
    return seen


@pytest.mark.django_db(transaction=True)  # the block must be the outermost transaction
def test_an_atomic_pipelined_block_commits_with_its_last_statements_then_runs_on_commit_callbacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commits = _psycopg_commits(monkeypatch)
    called: list[str] = []
    with atomic_pipelined():
        ids = reserve_ids([Tenant, Tenant])
        first = Tenant(pk=ids[0] if ids else None, slug="ap-one", name="One")
        insert(first)
        insert(Tenant(pk=ids[1] if ids else None, slug="ap-two", name="Two"))
        transaction.on_commit(lambda: called.append("after commit"))
        assert called == []
    assert called == ["after commit"]
    assert set(Tenant.objects.values_list("slug", flat=True)) == {"ap-one", "ap-two"}
    if connection.vendor == "postgresql":
        # the COMMIT went out with the INSERTs: Django's commit found the transaction ended
        assert commits == ["IDLE"]
    # the connection is usable and back in autocommit mode
    assert connection.get_autocommit()
    TenantFactory(slug="ap-after")
    assert Tenant.objects.filter(slug="ap-after").exists()


@pytest.mark.django_db(transaction=True)
def test_a_failing_statement_or_commit_of_an_atomic_pipelined_block_commits_nothing() -> None:
    from django.contrib.auth import get_user_model

    from portal.models import Membership

    called: list[str] = []
    TenantFactory(slug="ap-taken")

    def clash() -> None:  # a unique clash of a queued INSERT
        with atomic_pipelined():
            insert(Tenant(slug="ap-new", name="New"))
            insert(Tenant(slug="ap-taken", name="Clash"))
            transaction.on_commit(lambda: called.append("clash"))

    tenant = TenantFactory(slug="ap-fk")
    user = get_user_model().objects.create(username="ap-user")

    def dangling() -> (
        None
    ):  # a foreign key PostgreSQL checks only at COMMIT: the COMMIT's own error
        with atomic_pipelined():
            insert(Membership(user=user, tenant=tenant))
            insert(Membership(user_id=user.pk + 10_000, tenant=tenant))
            transaction.on_commit(lambda: called.append("fk"))

    with pytest.raises(IntegrityError):
        clash()
    with pytest.raises(IntegrityError):
        dangling()
    assert called == []
    assert not Tenant.objects.filter(slug="ap-new").exists()
    assert not Membership.objects.exists()
    with atomic_pipelined():  # and the connection works on
        insert(Membership(user=user, tenant=tenant))
    assert Membership.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_atomic_pipelined_block_inside_a_transaction_is_a_savepoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commits = _psycopg_commits(monkeypatch)

    def inner_then_fail() -> None:
        with transaction.atomic():
            with atomic_pipelined():
                insert(Tenant(slug="ap-inner", name="Inner"))
            assert Tenant.objects.filter(slug="ap-inner").exists()
            raise RuntimeError("the outer transaction rolls back")

    with pytest.raises(RuntimeError, match="outer transaction"):
        inner_then_fail()
    assert not Tenant.objects.filter(slug="ap-inner").exists()
    assert commits == []
    with atomic_pipelined():  # a block that runs no statement starts no transaction
        pass
    if connection.vendor == "postgresql":
        assert commits == ["IDLE"]


def test_insert_writes_what_save_would() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from portal.models import IdempotencyRecord

    tenant = Tenant(slug="fast", name="Fast")
    insert(tenant)
    assert tenant.pk is not None
    assert not tenant._state.adding
    stored = Tenant.objects.get(pk=tenant.pk)
    assert (stored.slug, stored.name) == ("fast", "Fast")
    assert (
        stored.created_at == tenant.created_at
    )  # auto_now_add set on the instance, as save() does
    now = timezone.now()
    record = IdempotencyRecord(
        pk=reserve_id(IdempotencyRecord),
        scope="user:1",
        method="POST",
        path="/api/v1/x/",
        key="k",
        fingerprint="f" * 64,
        response_headers={"ETag": '"3"'},
        response_body=b"\x00{}",
        created_at=now,
        expires_at=now + timedelta(hours=1),
    )
    insert(record)
    again = IdempotencyRecord.objects.get(pk=record.pk)
    assert again.response_headers == {"ETag": '"3"'}
    assert bytes(again.response_body) == b"\x00{}"
    assert again.state == IdempotencyRecord.STATE_IN_PROGRESS


def test_fast_datetimes_load_exactly_what_django_loads() -> None:
    import datetime as dt

    from portal.db import _c_timestamptz_loader, fast_datetimes

    stamps = [
        dt.datetime(2026, 11, 29, 22, 17, 41, 0, tzinfo=dt.UTC),
        dt.datetime(2026, 11, 29, 22, 17, 41, 123456, tzinfo=dt.UTC),
        dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=5))),
    ]
    for index, stamp in enumerate(stamps):
        Tenant.objects.filter(pk=TenantFactory(slug=f"t{index}").pk).update(created_at=stamp)
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            assert fast_datetimes(cursor) is cursor  # nothing to speed up: Django's own loading
        return
    sql = "SELECT created_at FROM portal_tenant WHERE slug LIKE 't%%' ORDER BY slug"
    with connection.cursor() as cursor:
        cursor.execute(sql)
        django_rows = cursor.fetchall()
    with connection.cursor() as cursor:
        fast_datetimes(cursor)
        cursor.execute(sql)
        fast_rows = cursor.fetchall()
        loader = cursor.cursor.adapters.get_loader(cursor.cursor.description[0].type_code, 0)
        assert loader is _c_timestamptz_loader()  # psycopg's own loader, not Django's subclass
    assert fast_rows == django_rows
    assert [row[0] for row in fast_rows] == stamps
    assert all(row[0].tzinfo is dt.UTC for row in fast_rows + django_rows)
