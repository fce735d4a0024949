"""`reserve_id`: an id taken before the INSERT is the row's, and the sequence moves past it."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.db import reserve_id
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


def test_insert_writes_what_save_would() -> None:
    from datetime import timedelta

    from django.utils import timezone

    from portal.db import insert
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
