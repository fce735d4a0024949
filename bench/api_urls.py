"""URLs for the API benchmark: the portal's own plus the trivial baseline endpoint."""

from typing import Any

from django.urls import include, path
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class PingView(APIView):
    """The baseline: DRF request/response handling, JSON rendering, nothing else."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes: list[Any] = []

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("bench/ping/", PingView.as_view()),
    path("", include("portal.urls")),
]
