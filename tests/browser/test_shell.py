"""Browser smoke test: the demo user logs in through the real form and sees the shell."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_demo_user_logs_in_and_sees_navigation(login, alice):
    # given alice, a member of team-a; when she logs in through the form
    page = login("alice")
    # then she sees the shell: her name, her team and every section of the navigation
    assert page.inner_text("[data-testid=welcome]") == "Welcome, alice"
    nav = page.inner_text("nav.mainnav")
    for section in ("Codespaces", "Quotas", "Cluster", "Dashboards", "API"):
        assert section in nav
    assert "Admin" not in nav  # not an operator
    assert page.locator("#tenant-select option:checked").inner_text() == "Team A"


def test_wrong_password_shows_form_error(page, alice):
    page.goto("/accounts/login/")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert "Please enter a correct username and password" in page.inner_text("[role=alert]")
