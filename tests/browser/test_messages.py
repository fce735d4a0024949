"""A success message survives the page reloading itself (auto-refresh) and is gone after moving on."""

import pytest

from portal.services import issue_token

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_success_message_survives_a_reload_of_the_same_page(login, alice):
    issue_token(alice, name="laptop")
    page = login("alice")
    page.goto("/account/tokens/")
    page.click("a:has-text('Revoke')")  # revoking asks once, on its confirmation page
    page.click("[data-testid=confirm-button]")
    page.wait_for_selector(".message.success")
    assert page.inner_text(".messages") == "Token “laptop” revoked."

    # when the page reloads itself (as auto-refreshing pages do), the message is still shown
    page.reload()
    assert page.inner_text(".messages[data-restored]") == "Token “laptop” revoked."

    # and after going elsewhere and back, it is not shown again
    page.goto("/")
    page.goto("/account/tokens/")
    assert page.locator(".messages").count() == 0
