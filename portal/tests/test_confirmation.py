"""Confirm, then act (portal.confirmation): the one GET-confirm / POST-act / redirect shape of the quota,
group and template deletes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from django import forms
from django.contrib.messages import get_messages
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.cache import SessionStore
from django.http import HttpRequest
from django.test import RequestFactory

from portal.confirmation import Confirmation, confirm_then_act
from portal.errors import Conflict
from portal.operator_log import ActionImpact

pytestmark = pytest.mark.django_db


class NoteForm(forms.Form):
    note = forms.CharField(max_length=10, required=False)


class Recorder:
    """The service call: records what it was given, answers the success message or raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.impacts = 0
        self.error = error

    def act(self, cleaned: Mapping[str, Any]) -> str:
        self.calls.append(dict(cleaned))
        if self.error is not None:
            raise self.error
        return "Thing deleted."

    def impact(self) -> ActionImpact:
        self.impacts += 1
        return ActionImpact(summary="Deletes the thing and its 3 parts.", teams=("team-a",))


def request_for(method: str, user: Any, data: dict[str, str] | None = None) -> HttpRequest:
    factory = RequestFactory()
    request = (
        factory.post("/things/1/delete/", data or {}) if method == "POST" else factory.get("/")
    )
    request.user = user
    request.session = SessionStore()
    request._messages = FallbackStorage(request)  # type: ignore[attr-defined]
    return request


def run(request: HttpRequest, recorder: Recorder, *, refused_url: str | None = "/things/1/") -> Any:
    form = NoteForm(request.POST if request.method == "POST" else None)
    confirmation = Confirmation(
        title="Delete thing?",
        impact=recorder.impact,
        button="Delete thing",
        cancel_url="/things/1/",
    )
    return confirm_then_act(
        request, form, confirmation, recorder.act, done_url="/things/", refused_url=refused_url
    )


def test_get_shows_what_will_happen_and_does_nothing(operator: Any) -> None:
    recorder = Recorder()
    response = run(request_for("GET", operator), recorder)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Deletes the thing and its 3 parts." in page
    assert "Teams affected: team-a." in page
    assert 'data-testid="confirm-button">Delete thing</button>' in page
    assert recorder.calls == []


def test_a_valid_post_acts_once_then_redirects_with_the_message(operator: Any) -> None:
    recorder = Recorder()
    request = request_for("POST", operator, {"note": "old"})
    response = run(request, recorder)
    assert (response.status_code, response["Location"]) == (302, "/things/")
    assert recorder.calls == [{"note": "old"}]
    assert recorder.impacts == 0  # the page is not shown, so its impact is not computed
    assert [str(m) for m in get_messages(request)] == ["Thing deleted."]


def test_an_invalid_post_shows_the_errors_with_400_and_does_nothing(operator: Any) -> None:
    recorder = Recorder()
    response = run(request_for("POST", operator, {"note": "x" * 11}), recorder)
    assert response.status_code == 400
    assert 'data-testid="error-note"' in response.content.decode()
    assert recorder.calls == []


def test_a_refusal_goes_to_the_refused_page_as_an_error_message(operator: Any) -> None:
    recorder = Recorder(error=Conflict("The thing is still in use by 2 parts.", code="in_use"))
    request = request_for("POST", operator, {"note": ""})
    response = run(request, recorder)
    assert (response.status_code, response["Location"]) == (302, "/things/1/")
    assert [str(m) for m in get_messages(request)] == ["The thing is still in use by 2 parts."]


def test_a_refusal_with_no_refused_page_is_raised(operator: Any) -> None:
    recorder = Recorder(error=Conflict("The thing is still in use.", code="in_use"))
    with pytest.raises(Conflict):
        run(request_for("POST", operator, {"note": ""}), recorder, refused_url=None)
