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
