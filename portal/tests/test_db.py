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
