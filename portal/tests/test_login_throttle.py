"""Sign-in lockout (issue item 13, issue 38): after too many failed passwords for a username from an
address, or from an address, the login page (and the admin's) refuses that pair or that address for a
cooling-off period, even with the right password; a username failing from many addresses is slowed
down, never locked, and an address that did not fail always gets its password checked."""

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


@pytest.fixture
def ops(db: Any) -> Any:
    user = UserFactory(username="ops", is_staff=True, is_superuser=True)
    user.set_password(PASSWORD)
    user.save()
    return user


@pytest.fixture
def alice_with_password(db: Any) -> Any:
    user = UserFactory(username="alice")
    user.set_password(PASSWORD)
    user.save()
    return user


def test_an_attacker_failing_on_ops_from_one_address_does_not_stop_ops_from_another(
    ops: Any,
) -> None:
    # issue 38: six wrong passwords locked a named account from every address
    attacker = Client(REMOTE_ADDR="198.51.100.66")
    for _ in range(30):
        _login(attacker, "ops", "wrong")
    owner = Client(REMOTE_ADDR="192.0.2.10")
    assert _login(owner, "ops", PASSWORD).status_code == 302
    assert _signed_in(owner)


def test_the_failing_address_is_locked_for_that_account_only(
    ops: Any, alice_with_password: Any
) -> None:
    attacker = Client(REMOTE_ADDR="198.51.100.66")
    for _ in range(5):
        _login(attacker, "ops", "wrong")
    response = _login(attacker, "OPS", PASSWORD)  # case does not dodge it
    assert not _signed_in(attacker)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]
    assert "try again in 15 minutes" in response.context["form"].non_field_errors()[0]
    assert _login(attacker, "alice", PASSWORD).status_code == 302


def test_many_failures_from_one_address_across_accounts_limit_that_address_not_the_accounts(
    ops: Any, alice_with_password: Any
) -> None:
    # issue 38: twenty failures from one address locked every account it named
    attacker = Client(REMOTE_ADDR="198.51.100.66")
    for index in range(25):
        _login(attacker, ("ops", "alice", "bob", "carol", "dave")[index % 5], "wrong")
    response = _login(attacker, "erin", PASSWORD)
    assert "Too many failed sign-ins" in response.context["form"].non_field_errors()[0]
    for name in ("ops", "alice"):
        elsewhere = Client(REMOTE_ADDR="192.0.2.10")
        assert _login(elsewhere, name, PASSWORD).status_code == 302
        assert _signed_in(elsewhere)


def test_failures_on_an_account_from_many_addresses_slow_it_down_without_locking_it(
    ops: Any,
) -> None:
    for index in range(8):
        _login(Client(), "ops", "wrong", REMOTE_ADDR=f"10.0.0.{index}")
    # an address that already failed on ops must wait before it tries ops again
    response = _login(Client(), "ops", PASSWORD, REMOTE_ADDR="10.0.0.3")
    errors = response.context["form"].non_field_errors()
    assert "slowed down" in errors[0]
    assert "try again in 8 seconds" in errors[0]
    # an address that did not fail signs in with the right password at once
    owner = Client(REMOTE_ADDR="192.0.2.10")
    assert _login(owner, "ops", PASSWORD).status_code == 302
    assert _signed_in(owner)


def test_the_account_delay_grows_with_its_failures_up_to_the_maximum() -> None:
    limit = 5
    assert [login_throttle.account_delay(n) for n in (0, 4, 5, 6, 8, 20)] == [0, 0, 1, 2, 8, 60]
    assert login_throttle.account_delay(limit + 100) == 60


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
