"""Dashboard pages (mounted at /dashboards/): each page and the JSON endpoint its script polls."""

from django.urls import path

from dashboards import defrag_views, views

app_name = "dashboards"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("data/", views.overview_data, name="overview-data"),
    path("tenants/", views.tenant, name="tenant"),
    path("tenants/data/", views.tenant_data, name="tenant-data"),
    path("fragmentation/", views.fragmentation, name="fragmentation"),
    path("fragmentation/data/", views.fragmentation_data, name="fragmentation-data"),
    path("fragmentation/defrag/", defrag_views.defrag_preview, name="defrag-preview"),
    path(
        "fragmentation/defrag/<int:plan_id>/apply/",
        defrag_views.defrag_apply,
        name="defrag-apply",
    ),
    path("savings/", views.savings, name="savings"),
    path("savings/data/", views.savings_data, name="savings-data"),
    path("chargeback/", views.chargeback, name="chargeback"),
    path("chargeback/data/", views.chargeback_data, name="chargeback-data"),
    path("chargeback.csv", views.chargeback_csv, name="chargeback-csv"),
]
