"""Query-string filters shared by every list endpoint: `?state=`, `?tenant=`, `?search=` and friends.

A viewset declares what it supports; the backends in REST_FRAMEWORK["DEFAULT_FILTER_BACKENDS"] apply it and
document each parameter in the OpenAPI schema (drf-spectacular reads `get_schema_operation_parameters`):

    class CodespaceViewSet(TenantScopedQuerysetMixin, viewsets.ModelViewSet):
        filter_fields = {"state": "state", "tenant": "tenant__slug", "template": "template__slug"}
        search_fields = ["name"]              # ?search=  (DRF SearchFilter, icontains)
        ordering_fields = ["created_at", "name"]  # ?ordering=-created_at  (DRF OrderingFilter)

`filter_fields` maps a query parameter to an ORM lookup. A comma-separated value means "any of"
(`?state=running,stopped`). When the model field has choices, unknown values are refused with 400 and the
allowed values listed, so a typo never silently returns an empty page. Filtering happens after tenant
scoping (the queryset is already scoped), so `?tenant=other-team` can only ever narrow to nothing.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db.models import Model, QuerySet
from rest_framework import filters
from rest_framework.filters import BaseFilterBackend
from rest_framework.request import Request

from portal.errors import InvalidInput
from portal.numbers import parse_int

MAX_VALUES = 50


def _model_field(model: type[Model], lookup: str) -> Any:
    field: Any = None
    current: Any = model
    for part in lookup.split("__"):
        try:
            field = current._meta.get_field(part)
        except (FieldDoesNotExist, AttributeError):
            return None
        current = getattr(field, "related_model", None)
    return field


class FieldFilterBackend(BaseFilterBackend):
    """Exact-match filters declared in the view's `filter_fields` ({param: orm_lookup})."""

    def _fields(self, view: Any) -> dict[str, str]:
        return dict(getattr(view, "filter_fields", None) or {})

    def filter_queryset(
        self, request: Request, queryset: QuerySet[Any], view: Any
    ) -> QuerySet[Any]:
        fields = self._fields(view)
        if not fields:
            return queryset
        errors: dict[str, list[str]] = {}
        for param, lookup in fields.items():
            raw = request.query_params.get(param)
            if raw is None or raw == "":
                continue
            values = [value.strip() for value in raw.split(",") if value.strip()][:MAX_VALUES]
            if not values:  # only commas and spaces: no filter, as an empty value is
                continue
            field = _model_field(queryset.model, lookup)
            choices = [str(value) for value, _ in (getattr(field, "choices", None) or [])]
            if choices:
                unknown = [value for value in values if value not in choices]
                if unknown:
                    errors[param] = [
                        f"Unknown value {unknown[0]!r}; use one of: {', '.join(choices)}."
                    ]
                    continue
            internal = getattr(field, "get_internal_type", lambda: "")()
            if internal in ("AutoField", "BigAutoField", "IntegerField", "ForeignKey") or (
                internal.endswith("IntegerField")
            ):
                if any(parse_int(value) is None for value in values):
                    errors[param] = ["Use whole numbers (comma-separated for several)."]
                    continue
            if internal == "BooleanField":
                mapping = {"true": True, "false": False}
                if not all(value in mapping for value in values):
                    errors[param] = ["Use 'true' or 'false'."]
                    continue
                queryset = queryset.filter(**{lookup: mapping[values[0]]})
                continue
            queryset = queryset.filter(**{f"{lookup}__in": values})
        if errors:
            raise InvalidInput(
                "; ".join(f"{param}: {messages[0]}" for param, messages in errors.items()),
                fields=errors,
            )
        return queryset

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        fields = self._fields(view)
        model = getattr(getattr(view, "queryset", None), "model", None)
        parameters = []
        for param, lookup in fields.items():
            field = _model_field(model, lookup) if model is not None else None
            choices = [str(value) for value, _ in (getattr(field, "choices", None) or [])]
            schema: dict[str, Any] = {"type": "string"}
            description = f"Only rows whose {lookup.replace('__', ' ')} is one of these values"
            if choices:
                description += f" ({', '.join(choices)})"
                # A comma-separated list of choices: keep the schema permissive but documented.
            parameters.append(
                {
                    "name": param,
                    "required": False,
                    "in": "query",
                    "description": description + "; comma-separated for several.",
                    "schema": schema,
                }
            )
        return parameters


class SearchFilter(filters.SearchFilter):
    """DRF's `?search=` (icontains over the view's `search_fields`), documented only where it applies."""

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        if not getattr(view, "search_fields", None):
            return []
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["description"] = "Case-insensitive substring match on: " + ", ".join(
                str(field).lstrip("^=@$") for field in view.search_fields
            )
        return parameters
