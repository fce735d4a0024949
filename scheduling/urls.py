"""Pages of the scheduling app (mounted at /cluster/)."""

from django.urls import path

from scheduling import views

app_name = "scheduling"
urlpatterns = [
    path("", views.cluster, name="cluster"),
    path("nodes/<int:node_id>/", views.node_detail, name="node"),
    path("nodes/<int:node_id>/<str:action>/", views.node_action, name="node-action"),
    path("gpus/<int:gpu_id>/<str:action>/", views.gpu_action, name="gpu-action"),
    path("jobs/", views.jobs, name="jobs"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel, name="job-cancel"),
    path("workloads/<int:workload_id>/", views.workload_detail, name="workload"),
    path("audit/", views.audit, name="audit"),
    path("what-if/", views.what_if, name="what-if"),
]
