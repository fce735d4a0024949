from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from portal.scoping import is_operator, tenants_for


def tenancy(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {
        "active_tenant": getattr(request, "active_tenant", None),
        "my_tenants": list(tenants_for(user).order_by("slug")[:50]),
        "is_operator": is_operator(user),
    }


def scheduling(request: HttpRequest) -> dict[str, Any]:
    """`scheduling_down`: the reading behind the "Scheduling is down" banner on every page, for
    everyone (portal.heartbeat; None while scheduling runs)."""
    from portal.heartbeat import scheduling_status  # models: not at settings import time

    status = scheduling_status()
    return {"scheduling_down": None if status.up else status}
