"""The operators' activity log: every operator action (who, when, why, what it affected), filtered
by operator, action, target and time range, paged. Thin: validate the filters, query, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from portal.forms import ActivityFilterForm
from portal.operator_log import LogFilters, filter_operator_actions
from portal.scoping import require_operator

PAGE_SIZE = 50


@login_required
@require_GET
def activity_log(request: HttpRequest) -> HttpResponse:
    require_operator(request.user)
    form = ActivityFilterForm(request.GET or None)
    valid = form.is_valid() if request.GET else True
    filters = form.filters() if request.GET and valid else LogFilters()
    page = Paginator(filter_operator_actions(filters), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode(), "valid": valid}
    return render(request, "portal/activity_log.html", context, status=200 if valid else 400)
