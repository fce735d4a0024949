"""Pages of the codespaces app (mounted at /codespaces/)."""

from django.urls import path

from codespaces import template_views, views

app_name = "codespaces"
urlpatterns = [
    path("", views.my_codespaces, name="list"),
    path("new/", views.create, name="create"),
    path("new/preview.json", views.preview_json, name="preview-json"),
    path("status.json", views.status_json, name="status-json"),
    path("team/", views.team_codespaces, name="team"),
    path("all/", views.all_codespaces, name="all"),
    path("savings/", views.savings, name="savings"),
    path("waste/", views.waste_page, name="waste"),
    path("waste.csv", views.waste_csv, name="waste-csv"),
    path("templates/", template_views.template_list, name="templates"),
    path("templates/new/", template_views.template_form, name="template-create"),
    path("templates/<int:pk>/edit/", template_views.template_form, name="template-edit"),
    path("templates/<int:pk>/delete/", template_views.template_delete, name="template-delete"),
    path("<int:pk>/", views.detail, name="detail"),
    path("<int:pk>/start/", views.start, name="start"),
    path("<int:pk>/stop/", views.stop, name="stop"),
    path("<int:pk>/delete/", views.delete, name="delete"),
    path("<int:pk>/keep/", views.keep, name="keep"),
    path("<int:pk>/move-consent/", views.move_consent, name="move-consent"),
]
