"""The home page: a status page per persona (dashboards.home computes it)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboards.home import home_status
from portal.models import Membership
from portal.scoping import current_user


@login_required
def home(request: HttpRequest) -> HttpResponse:
    user = current_user(request)
    context = {
        "status": home_status(user, getattr(request, "active_tenant", None)),
        "memberships": Membership.objects.filter(user=user).select_related("tenant"),
    }
    return render(request, "portal/home.html", context)
