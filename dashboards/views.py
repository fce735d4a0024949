"""Dashboard pages. Each page renders its controls and definitions; its JS polls the page's JSON endpoint,
which calls a telemetry service (scheduling.telemetry.series / .fragmentation) and the figure builders of
portal.charts. Thin: parse the query, scope it to the user, call, render."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from core import units
from dashboards.defrag_views import panel_context
from portal import charts, numbers
from portal.csv_export import csv_writer
from portal.errors import DomainError, InvalidInput
from portal.models import Tenant
from portal.numbers import parse_int
from portal.scoping import current_user, is_operator, tenants_for
from quotas.models import QuotaGroup
from scheduling.models import Shard
from scheduling.telemetry import fragmentation as frag
from scheduling.telemetry import series
from scheduling.telemetry.models import PoolSample, Resolution

DEFINITIONS = {
    "allocation": (
        "GPU allocation = allocated GPU capacity ÷ schedulable GPU capacity, unhealthy GPUs excluded; "
        "in cards (cards holding any share ÷ healthy cards) and in compute (the GPU compute handed out "
        "÷ healthy cards, where a 30 % slice of a card counts as 0.3 of a card)."
    ),
    "utilization": (
        "Utilization = mean SM utilization (DCGM SM active, or HAMi's per-container SM % on shared "
        "cards; synthetic on the simulated cluster)."
    ),
    "idle": (
        "Idle allocated GPU-hours = GPU capacity held during minutes whose SM utilization was below 5 %."
    ),
    "fragmentation": (
        "Fragmentation = free GPU capacity that the current request mix cannot use (the expected "
        "share of free GPU compute that a random request of the active and pending mix could not take)."
    ),
}
RANGE_CHOICES = [(k, k) for k in series.RANGES]


class RangeForm(forms.Form):
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False, initial=series.DEFAULT_RANGE)


def _error(exc: DomainError) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": exc.code, "message": exc.message, "fields": exc.fields}},
        status=exc.http_status,
    )


def _window(request: HttpRequest) -> series.Window:
    return series.window(request.GET.get("range") or None, timezone.now())


def _page(request: HttpRequest, template: str, data_url: str, **context: Any) -> HttpResponse:
    form = RangeForm(request.GET or None)
    form.is_valid()
    context.update(
        {
            "range_form": form,
            "data_url": data_url,
            "refresh_seconds": settings.TESSERA_DASHBOARD_REFRESH_SECONDS,
            "definitions": DEFINITIONS,
        }
    )
    return render(request, template, context)


CACHE_SECONDS = 120


def _data_version() -> str:
    """Changes whenever ingestion writes a minute: the latest minute row of any pool."""
    latest = (
        PoolSample.objects.filter(resolution=Resolution.MINUTE)
        .order_by("-ts")
        .values_list("ts", flat=True)
        .first()
    )
    return latest.isoformat() if latest else "none"


def _cached(parts: tuple[Any, ...], compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The JSON payload for `parts` (which hold every input, including the data version), computed once
    and shared by every viewer polling the same page until the next ingestion changes the version."""
    key = "dashboards:" + hashlib.sha256(repr(parts).encode()).hexdigest()
    payload = cache.get(key)
    if payload is None:
        payload = compute()
        cache.set(key, payload, CACHE_SECONDS)
    return payload


@dataclass(frozen=True, slots=True)
class Payload:
    """What a dashboard's JSON endpoint serves: `compute()`, shared through the cache under `parts`
    (every input, the data version included; None: not cached, nothing tells when it changes)."""

    parts: tuple[Any, ...] | None
    compute: Callable[[], dict[str, Any]]


def data_endpoint(
    view: Callable[[HttpRequest], Payload | HttpResponse],
) -> Callable[[HttpRequest], HttpResponse]:
    """The one shape of the dashboards' `*_data` endpoints: signed in; the view reads and scopes its
    query (the range window, the tenant, the pool, ...) and returns a `Payload` (or a response it built
    itself); a `DomainError` on the way (a bad range or size) is a 400 JSON body naming the field; the
    payload is computed once per `parts` and served as JSON."""

    @login_required
    @wraps(view)
    def endpoint(request: HttpRequest) -> HttpResponse:
        try:
            answer = view(request)
        except DomainError as exc:
            return _error(exc)
        if isinstance(answer, HttpResponse):
            return answer
        if answer.parts is None:
            return JsonResponse(answer.compute())
        return JsonResponse(_cached(answer.parts, answer.compute))

    return endpoint


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 1)


# --------------------------------------------------------------------------- overview
@login_required
def overview(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboards/overview.html", reverse("dashboards:overview-data"))


@data_endpoint
def overview_data(request: HttpRequest) -> Payload:
    win = _window(request)
    return Payload(("overview", win, _data_version()), lambda: _overview(win))


def _overview(win: series.Window) -> dict[str, Any]:
    pools = series.pool_series(win)
    summary = series.cluster_summary(win)
    return {
        "resolution": win.resolution,
        "figures": {
            "allocation": charts.allocation_figure(pools),
            "pending": charts.pending_figure(pools),
            "waits": charts.wait_figure(pools),
        },
        "summary": {
            "allocation_milli": summary.allocation_milli_percent,
            "allocation_cards": summary.allocation_cards_percent,
            "utilization": summary.utilization_percent,
            "pending": summary.pending_now,
            "wait_p50": _minutes(summary.wait_p50_seconds),
            "wait_p95": _minutes(summary.wait_p95_seconds),
        },
    }


# --------------------------------------------------------------------------- per tenant
def _chosen_tenant(request: HttpRequest) -> Tenant:
    """The tenant of ?tenant=slug among those the user may see (404 otherwise); default: the active
    tenant, else the first one."""
    user = current_user(request)
    visible = tenants_for(user).order_by("slug")
    slug = request.GET.get("tenant")
    if slug:
        tenant = visible.filter(slug=slug).first()
        if tenant is None:
            raise Http404("Not found.")
        return tenant
    active = getattr(request, "active_tenant", None)
    if isinstance(active, Tenant) and visible.filter(pk=active.pk).exists():
        return active
    tenant = visible.first()
    if tenant is None:
        raise Http404("You belong to no team yet.")
    return tenant


@login_required
def tenant(request: HttpRequest) -> HttpResponse:
    chosen = _chosen_tenant(request)
    return _page(
        request,
        "dashboards/tenant.html",
        reverse("dashboards:tenant-data"),
        tenants=tenants_for(current_user(request)).order_by("slug"),
        chosen=chosen,
    )


@data_endpoint
def tenant_data(request: HttpRequest) -> Payload:
    chosen = _chosen_tenant(request)
    win = _window(request)
    return Payload(("tenant", chosen.pk, win, _data_version()), lambda: _tenant(chosen, win))


def _tenant(chosen: Tenant, win: series.Window) -> dict[str, Any]:
    usage = series.tenant_usage(chosen, win)
    return {
        "resolution": win.resolution,
        "figures": {
            "quota": charts.tenant_quota_figure(chosen.slug, usage.points),
            "utilization": charts.tenant_utilization_figure(chosen.slug, usage.points),
            "wasting": charts.wasting_figure(chosen.slug, usage.wasting),
        },
        "summary": {
            "allocated_gpu_hours": usage.allocated_gpu_hours,
            "used_gpu_hours": usage.used_gpu_hours,
            "idle_gpu_hours": usage.idle_gpu_hours,
            "utilization": usage.utilization_percent,
        },
        "tables": {
            # The top codespaces, then every other workload as one row: the rows add up to the
            # summary's idle and allocated GPU-h (same samples, same resolution).
            "wasting": {
                "columns": ["Codespace", "Idle GPU-h", "Allocated GPU-h", "Utilization %"],
                "rows": [
                    [w.name, w.idle_gpu_hours, w.allocated_gpu_hours, w.utilization_percent]
                    for w in [*usage.wasting, *([usage.elsewhere] if usage.elsewhere else [])]
                ],
            }
        },
    }


# --------------------------------------------------------------------------- fragmentation
def _chosen_pool(request: HttpRequest) -> QuotaGroup | None:
    name = request.GET.get("pool")
    pools = QuotaGroup.objects.order_by("name")
    if name:
        pool = pools.filter(name=name).first()
        if pool is None:
            raise Http404("Not found.")
        return pool
    return pools.first()


def _amount_or_none(
    raw: str | None, field: str, unit: str, maximum: int, *, minimum: float = 0
) -> int | None:
    """A query parameter typed in people's units (% of a GPU, GiB) as the exact milli / MiB."""
    if raw is None or raw == "":
        return None
    try:
        return units.to_base(raw, unit, minimum=minimum, maximum=maximum)
    except units.UnitError as exc:
        raise InvalidInput(f"{field}={raw[:32]!r}: {exc}", fields={field: [str(exc)]}) from exc


@login_required
def fragmentation(request: HttpRequest) -> HttpResponse:
    pool = _chosen_pool(request)
    return _page(
        request,
        "dashboards/fragmentation.html",
        reverse("dashboards:fragmentation-data"),
        pools=QuotaGroup.objects.order_by("name"),
        chosen_pool=pool,
        presets=frag.presets_for(pool),
        defrag=panel_context(request, pool),
    )


@data_endpoint
def fragmentation_data(request: HttpRequest) -> Payload:
    pool = _chosen_pool(request)
    if pool is None:
        raise Http404("No pool yet.")
    chosen = frag.preset(
        request.GET.get("preset") or None,
        _amount_or_none(request.GET.get("gpu_percent"), "gpu_percent", "percent", 100, minimum=0.1),
        _amount_or_none(request.GET.get("gpu_memory_gib"), "gpu_memory_gib", "gib", 1024),
        group=pool,
    )
    version = Shard.objects.filter(group=pool).values_list("version", flat=True).first()
    # no shard yet: nothing tells when the map changes, so no cache
    parts = None if version is None else ("fragmentation", pool.pk, chosen, version)
    return Payload(parts, lambda: _fragmentation(pool, chosen))


def _fragmentation(pool: QuotaGroup, chosen: frag.SlicePreset) -> dict[str, Any]:
    fmap = frag.fragmentation_map(pool, chosen)
    memory_rows = list(zip(fmap.free_memory_mib, fmap.memory_mib, strict=True))
    return {
        "figures": {
            "compute": charts.fragmentation_heatmap(
                fmap.nodes,
                fmap.gpu_columns,
                [
                    [None if v is None else units.milli_to_percent(v) for v in row]
                    for row in fmap.free_milli
                ],
                title=f"Free compute per GPU — {pool.name}",
                unit="% of the GPU",
                maximum=100,
            ),
            "memory": charts.fragmentation_heatmap(
                fmap.nodes,
                fmap.gpu_columns,
                [
                    [
                        None if free is None or not card else round(free / card * 100, 1)
                        for free, card in zip(frees, cards, strict=True)
                    ]
                    for frees, cards in memory_rows
                ],
                title=f"Free memory per GPU — {pool.name}",
                unit="% of the GPU's memory",
                maximum=100,
                hover=[
                    [
                        None
                        if free is None or card is None
                        else f"{units.mib_to_gib(free):g} of {units.mib_to_gib(card):g} GiB"
                        for free, card in zip(frees, cards, strict=True)
                    ]
                    for frees, cards in memory_rows
                ],
            ),
            "fits": charts.slice_fit_figure(chosen.label, fmap.fits),
        },
        "summary": {
            "preset": chosen.label,
            "fits_total": fmap.fits_total,
            "free_gpus": round(fmap.free_milli_total / units.MILLI_PER_GPU, 2),
            "fragmented_gpus": round(fmap.fragmented_milli / units.MILLI_PER_GPU, 2),
            "fragmentation": fmap.fragmentation_percent,
        },
    }


# --------------------------------------------------------------------------- savings
@login_required
def savings(request: HttpRequest) -> HttpResponse:
    return _page(request, "dashboards/savings.html", reverse("dashboards:savings-data"))


@data_endpoint
def savings_data(request: HttpRequest) -> Payload:
    win = _window(request)
    return Payload(("savings", win, _data_version()), lambda: _savings(win))


def _savings(win: series.Window) -> dict[str, Any]:
    points = series.savings_series(win)
    last = points[-1] if points else None
    return {
        "resolution": win.resolution,
        "figures": {"savings": charts.savings_figure(points)},
        "summary": {
            "unsliced": last.cards_unsliced if last else None,
            "occupied": last.cards_occupied if last else None,
            "saved": last.cards_saved if last else None,
        },
    }


# --------------------------------------------------------------------------- chargeback
def _chargeback_tenants(request: HttpRequest) -> list[Tenant] | None:
    """The tenants a chargeback covers: the one named by ?tenant=slug among those the user may see
    (404 otherwise), else all of the user's (None: every tenant, for operators)."""
    user = current_user(request)
    slug = request.GET.get("tenant")
    if slug:
        tenant = tenants_for(user).filter(slug=slug).first()
        if tenant is None:
            raise Http404("Not found.")
        return [tenant]
    return None if is_operator(user) else list(tenants_for(user))


def _chargeback_rows(request: HttpRequest) -> list[series.ChargebackRow]:
    months = parse_int(request.GET.get("months") or "3", minimum=-1, maximum=10**6)
    if months is None:
        months = -1
    tenants = _chargeback_tenants(request)
    now = timezone.now()
    scope = None if tenants is None else sorted(t.pk for t in tenants)
    parts = ("chargeback", months, scope, now.strftime("%Y-%m"), _data_version())
    return _cached(parts, lambda: {"rows": series.chargeback(months, now, tenants)})["rows"]


@login_required
def chargeback(request: HttpRequest) -> HttpResponse:
    return _page(
        request,
        "dashboards/chargeback.html",
        reverse("dashboards:chargeback-data"),
        prices=sorted(series.gpu_hour_prices().items()),
        currency=settings.TESSERA_CHARGEBACK_CURRENCY,
        month_choices=(1, 3, 6, 12),
        tenants=tenants_for(current_user(request)).order_by("slug"),
    )


@data_endpoint
def chargeback_data(request: HttpRequest) -> HttpResponse:
    rows = _chargeback_rows(request)  # cached by its inputs (`_cached`)
    currency = settings.TESSERA_CHARGEBACK_CURRENCY
    return JsonResponse(
        {
            "figures": {"chargeback": charts.chargeback_figure(rows, currency)},
            "summary": {
                "total_cost": numbers.money(sum((r.cost for r in rows), start=0), currency),
                "allocated_gpu_hours": round(sum(r.allocated_gpu_hours for r in rows), 1),
                "used_gpu_hours": round(sum(r.used_gpu_hours for r in rows), 1),
            },
            "tables": {
                "chargeback": {
                    "columns": [
                        "Month",
                        "Tenant",
                        "GPU model",
                        "Allocated GPU-h",
                        "Used GPU-h",
                        f"Price / GPU-h ({currency})",
                        f"Charge ({currency})",
                    ],
                    "rows": [
                        [
                            r.month,
                            r.tenant_slug,
                            r.gpu_model,
                            r.allocated_gpu_hours,
                            r.used_gpu_hours,
                            str(r.price_per_gpu_hour),
                            str(r.cost),
                        ]
                        for r in rows
                    ],
                }
            },
        }
    )


@login_required
def chargeback_csv(request: HttpRequest) -> HttpResponse:
    try:
        rows = _chargeback_rows(request)
    except DomainError as exc:
        return _error(exc)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="tessera-chargeback.csv"'
    writer = csv_writer(response)
    writer.writerow(
        [
            "month",
            "tenant",
            "gpu_model",
            "allocated_gpu_hours",
            "used_gpu_hours",
            "price_per_gpu_hour",
            "charge",
            "currency",
        ]
    )
    currency = settings.TESSERA_CHARGEBACK_CURRENCY
    for r in rows:
        writer.writerow(
            [
                r.month,
                r.tenant_slug,
                r.gpu_model,
                f"{r.allocated_gpu_hours:.3f}",
                f"{r.used_gpu_hours:.3f}",
                r.price_per_gpu_hour,
                r.cost,
                currency,
            ]
        )
    return response
