"""Why a single sign-on did not complete, in words for the person at the login page."""

from __future__ import annotations


class SsoError(Exception):
    """A sign-in through the provider that cannot complete. `message` is shown on the error page;
    `http_status` is 400 for what the provider sent (claims, state), 502 when it did not answer."""

    def __init__(self, message: str, *, http_status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.http_status = http_status
