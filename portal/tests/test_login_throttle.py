"""Sign-in lockout (issue item 13): after too many failed passwords for a username or from an address,
the login page (and the admin's) refuses for a cooling-off period, even with the right password."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client, override_settings

from portal import login_throttle
from portal.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"
LOGIN_URL = "/accounts/login/"


@pytest.fixture(autouse=True)
def fresh_counters() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def operator_with_password(db: Any) -> Any:
    user = UserFactory(username="operator", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


def _login(client: Client, username: str, password: str, url: str = LOGIN_URL, **extra: Any) -> Any:
    return client.post(url, {"username": username, "password": password}, **extra)


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_thirty_wrong_passwords_then_the_right_one_does_not_sign_in(
    client: Client, operator_with_password: Any
) -> None:
    for _ in range(30):
        assert _login(client, "operator", "wrong").status_code == 200
    response = _login(client, "operator", PASSWORD)
    assert response.status_code == 200
    assert not _signed_in(client)
    errors = response.context["form"].non_field_errors()
    assert "Too many failed sign-ins" in errors[0]
    assert "try again in 15 minutes" in errors[0]


def test_the_sixth_attempt_after_five_failures_is_refused_even_with_the_right_password(
    client: Client, operator_with_password: Any
) -> None:
    for _ in range(5):
        response = _login(client, "operator", "wrong")
        assert "Please enter a correct username" in response.context["form"].non_field_errors()[0]
    response = _login(client, "operator", PASSWORD)
    assert not _signed_in(client)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]


def test_fewer_failures_than_the_limit_still_sign_in_and_are_forgiven(
    client: Client, operator_with_password: Any
) -> None:
    for _ in range(4):
        _login(client, "operator", "wrong")
    assert _login(client, "operator", PASSWORD).status_code == 302
    assert _signed_in(client)
    client.logout()
    for _ in range(4):  # the success cleared the username's count
        _login(client, "operator", "wrong")
    assert _login(client, "operator", PASSWORD).status_code == 302


def test_the_lockout_ends_after_the_cooling_off_period(
    client: Client, operator_with_password: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(6):
        _login(client, "operator", "wrong")
    assert not _signed_in(client)
    real_time = login_throttle.time.time
    monkeypatch.setattr(login_throttle.time, "time", lambda: real_time() + 901)
    cache.delete_many([key for key, _ in login_throttle._subjects("operator", "127.0.0.1")])
    assert _login(client, "operator", PASSWORD).status_code == 302
    assert _signed_in(client)


def test_the_username_is_locked_whatever_address_the_guesses_come_from(
    operator_with_password: Any,
) -> None:
    for index in range(5):
        _login(Client(), "operator", "wrong", REMOTE_ADDR=f"10.0.0.{index}")
    client = Client()
    _login(client, "Operator", PASSWORD, REMOTE_ADDR="10.0.1.1")  # case does not dodge it
    response = _login(client, "operator", PASSWORD, REMOTE_ADDR="10.0.1.1")
    assert not _signed_in(client)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]


@override_settings(TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS=3)
def test_one_address_guessing_many_usernames_is_locked_out(operator_with_password: Any) -> None:
    client = Client(REMOTE_ADDR="10.9.9.9")
    for name in ("alice", "bob", "carol"):
        _login(client, name, "wrong")
    response = _login(client, "operator", PASSWORD)
    assert not _signed_in(client)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]
    # another address is not affected
    other = Client(REMOTE_ADDR="10.9.9.10")
    assert _login(other, "operator", PASSWORD).status_code == 302


@override_settings(TESSERA_LOGIN_MAX_FAILURES_PER_ADDRESS=3, TESSERA_TRUSTED_PROXY_COUNT=1)
def test_behind_a_trusted_proxy_the_address_is_the_one_the_proxy_saw(
    operator_with_password: Any,
) -> None:
    # the client forges a first entry; the proxy appends the real address
    for name in ("alice", "bob", "carol"):
        _login(
            Client(),
            name,
            "wrong",
            REMOTE_ADDR="10.0.0.1",
            HTTP_X_FORWARDED_FOR=f"1.1.1.{len(name)}, 203.0.113.7",
        )
    locked = Client()
    _login(locked, "operator", PASSWORD, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.7")
    assert not _signed_in(locked)
    # another client behind the same proxy signs in
    other = Client()
    _login(other, "operator", PASSWORD, REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.2")
    assert _signed_in(other)


def test_the_admin_login_is_locked_out_too(client: Client, operator_with_password: Any) -> None:
    for _ in range(5):
        _login(client, "operator", "wrong", url="/admin/login/")
    response = _login(client, "operator", PASSWORD, url="/admin/login/")
    assert not _signed_in(client)
    assert "Too many failed sign-ins" in response.content.decode()


def test_concurrent_guesses_cannot_slip_under_the_limit(operator_with_password: Any) -> None:
    """Each attempt is counted before its password is checked: of 20 simultaneous guesses at most
    the limit get a password check."""
    checked: list[bool] = []
    barrier = threading.Barrier(20)

    def guess() -> None:
        barrier.wait()
        try:
            login_throttle.admit_attempt("operator", "10.1.1.1")
        except login_throttle.LoginRefused:
            return
        checked.append(True)

    threads = [threading.Thread(target=guess) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(checked) == 5
