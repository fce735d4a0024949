"""One username rule wherever an account is made (issue 38): NFKC-normalised, one script, and not
confusable with another account's name (admin, single sign-on, the demo seed)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from portal.tests.factories import UserFactory
from portal.usernames import check_new_username, username_skeleton

CYRILLIC_O_PS = "\u043eps"  # "оps": Cyrillic о, Latin p s
ALL_CYRILLIC_OPS = "\u043e\u0440\u0455"  # "орѕ": every letter Cyrillic


def test_look_alikes_share_a_skeleton_and_different_names_do_not() -> None:
    assert username_skeleton(CYRILLIC_O_PS) == username_skeleton("ops")
    assert username_skeleton(ALL_CYRILLIC_OPS) == username_skeleton("ops")
    assert username_skeleton("OPS") == username_skeleton("ops")
    assert username_skeleton("0ps") == username_skeleton("ops")
    assert username_skeleton("bi11") == username_skeleton("bill")
    assert username_skeleton("opt") != username_skeleton("ops")


@pytest.mark.django_db
def test_a_new_username_is_nfkc_normalised() -> None:
    assert check_new_username("\uff4f\uff50\uff53") == "ops"  # fullwidth ｏｐｓ


@pytest.mark.django_db
def test_a_mixed_script_username_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError) as caught:
        check_new_username(CYRILLIC_O_PS)
    assert list(caught.value.message_dict) == ["username"]
    assert "mixes scripts" in caught.value.message_dict["username"][0]


@pytest.mark.django_db
@pytest.mark.parametrize("_case", ["cyrillic", "case", "digit zero"])
def test_a_username_confusable_with_another_account_is_refused(_case: str) -> None:
    UserFactory(username="ops")
    candidate = {"cyrillic": ALL_CYRILLIC_OPS, "case": "OPS", "digit zero": "0ps"}[_case]
    with pytest.raises(ValidationError) as caught:
        check_new_username(candidate)
    assert "too much like the existing account 'ops'" in caught.value.message_dict["username"][0]


@pytest.mark.django_db
def test_a_username_may_stay_what_it_is_and_single_script_names_are_welcome() -> None:
    ops = UserFactory(username="ops")
    assert check_new_username("ops", user_pk=ops.pk) == "ops"
    assert check_new_username("андрей") == "андрей"
    assert check_new_username("dana.müller") == "dana.müller"
    assert check_new_username("やまだ太郎") == "やまだ太郎"  # Japanese mixes kana and Han by nature


@pytest.mark.django_db
def test_the_admin_refuses_to_add_a_look_alike_user(client: Any, operator: Any) -> None:
    UserFactory(username="ops")
    client.force_login(operator)
    response = client.post(
        "/admin/auth/user/add/",
        {
            "username": ALL_CYRILLIC_OPS,
            "password1": "x-Long-pass-42",
            "password2": "x-Long-pass-42",
        },
    )
    assert response.status_code == 200
    assert "too much like the existing account" in response.content.decode()
    assert not User.objects.filter(username=ALL_CYRILLIC_OPS).exists()


@pytest.mark.django_db
def test_the_admin_refuses_to_rename_a_user_to_a_look_alike(client: Any, operator: Any) -> None:
    UserFactory(username="ops")
    other = UserFactory(username="bob")
    client.force_login(operator)
    page = client.get(f"/admin/auth/user/{other.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None}
    data.update(username=CYRILLIC_O_PS, date_joined_0="2026-01-01", date_joined_1="00:00:00")
    data.pop("groups", None)
    data.pop("user_permissions", None)
    data.pop("password", None)
    data.pop("date_joined", None)
    data.pop("last_login", None)
    response = client.post(f"/admin/auth/user/{other.pk}/change/", data)
    assert response.status_code == 200
    assert "mixes scripts" in response.content.decode()
    other.refresh_from_db()
    assert other.username == "bob"


@pytest.mark.django_db
def test_the_demo_seed_refuses_to_create_a_user_beside_a_look_alike() -> None:
    from io import StringIO

    from django.core.management.base import CommandError

    from portal.demo import seed

    UserFactory(username=ALL_CYRILLIC_OPS)
    with pytest.raises(CommandError) as caught:
        seed(StringIO())
    assert "Demo user 'ops'" in str(caught.value)
    assert "too much like the existing account" in str(caught.value)
    assert not User.objects.filter(username="ops").exists()


def test_createsuperuser_refuses_a_look_alike_of_an_existing_username(
    db: Any, monkeypatch: Any
) -> None:
    # issue 38, defect 8: Django's own createsuperuser made "оps" (Cyrillic о) beside "ops"
    User.objects.create_user("ops", password="x")
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a-long-password-1")
    with pytest.raises(CommandError, match="mixes scripts"):
        call_command("createsuperuser", "--noinput", username="\u043eps", email="o@example.com")
    all_cyrillic = "\u043e\u0440\u0455"  # орѕ
    with pytest.raises(CommandError, match="looks too much like the existing account 'ops'"):
        call_command("createsuperuser", "--noinput", username=all_cyrillic, email="o@example.com")
    assert not User.objects.filter(username__in=["\u043eps", all_cyrillic]).exists()
    call_command("createsuperuser", "--noinput", username="ops2", email="o@example.com")
    assert User.objects.filter(username="ops2", is_superuser=True).exists()


def test_an_account_whose_name_is_unchanged_still_validates(db: Any) -> None:
    # the field's validator does not know the account: it must not see a user as its own look-alike
    user = User.objects.create_user("carol", password="x")
    user.full_clean()
