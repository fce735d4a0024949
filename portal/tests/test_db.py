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
