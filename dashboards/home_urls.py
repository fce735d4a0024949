"""The home page's URL (mounted at / by portal.urls)."""

from django.urls import path

from dashboards import home_views

urlpatterns = [path("", home_views.home, name="home")]
