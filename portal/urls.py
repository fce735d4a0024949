"""Project URLs. Each app mounts its pages under its own prefix and its API under /api/v1/."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from portal import activity_views, views
from portal.api.redoc import redoc_script
from portal.api.views import ApiRootView
from portal.forms import AdminLoginForm, LoginForm
from portal.sso.views import SsoCallbackView, SsoStartView

# Every page that takes a password goes through the sign-in lockout (portal.login_throttle).
admin.site.login_form = AdminLoginForm

# Django tries patterns in order on every request: the API comes first, its busiest routes first.
api_v1: list[URLPattern | URLResolver] = [
    path("", include("codespaces.api.urls")),
    path("", include("portal.api.urls")),
    path("", include("quotas.api.urls")),
    path("", include("scheduling.api.urls")),
    path("", include("scheduling.telemetry.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("redoc/redoc.standalone.js", redoc_script, name="api-redoc-script"),
    path("", ApiRootView.as_view(), name="api-root"),
]

urlpatterns = [
    re_path(r"^api/(?P<version>v1)/", include(api_v1)),
    path("", include("dashboards.home_urls")),
    path(
        "accounts/login/",
        views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    path("accounts/sso/start/", SsoStartView.as_view(), name="sso-start"),
    path("accounts/sso/callback/", SsoCallbackView.as_view(), name="sso-callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "accounts/password/",
        auth_views.PasswordChangeView.as_view(),
        name="password_change",
    ),
    path(
        "accounts/password/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("account/tokens/", views.tokens, name="tokens"),
    path("account/tokens/<int:token_id>/revoke/", views.revoke_token, name="token-revoke"),
    path("tenant/switch/", views.switch_tenant, name="tenant-switch"),
    path("operators/activity/", activity_views.activity_log, name="operator-log"),
    path("quotas/", include("quotas.urls")),
    path("codespaces/", include("codespaces.urls")),
    path("cluster/", include("scheduling.urls")),
    path("dashboards/", include("dashboards.urls")),
    path("", include("dashboards.metrics_urls")),
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico on pages that name none (the admin, the API docs): the static icon.
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
]

# An unhandled exception anywhere (a view or a middleware): JSON on /api/ paths, HTML elsewhere.
handler500 = views.server_error
handler404 = views.page_not_found
handler403 = views.permission_denied
