"""Pages of the quotas app (mounted at /quotas/)."""

from django.urls import path

from quotas import views

app_name = "quotas"
urlpatterns = [
    path("", views.index, name="index"),
    path("groups/new/", views.group_form, name="group-create"),
    path("groups/selector-preview/", views.selector_preview, name="selector-preview"),
    path("groups/<int:pk>/", views.group_detail, name="group"),
    path("groups/<int:pk>/edit/", views.group_form, name="group-edit"),
    path("groups/<int:pk>/what-if/", views.group_what_if, name="group-what-if"),
    path("groups/<int:pk>/delete/", views.group_delete, name="group-delete"),
    path("groups/<int:group_pk>/quotas/new/", views.quota_create, name="quota-create"),
    path("reclaim-notices/", views.reclaim_notices, name="reclaim-notices"),
    path("<int:pk>/", views.quota_detail, name="quota"),
    path("<int:pk>/edit/", views.quota_edit, name="quota-edit"),
    path("<int:pk>/what-if/", views.quota_what_if, name="quota-what-if"),
    path("<int:pk>/delete/", views.quota_delete, name="quota-delete"),
    path("<int:pk>/fairness/", views.quota_fairness_action, name="quota-fairness"),
]
