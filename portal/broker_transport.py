"""kombu's Redis transport, except that one malformed message does not stop the worker.

kombu decodes each message it pops from a queue (`BRPOP`) in the worker's event loop; a payload that is
not a kombu message (an empty or truncated string, not JSON, JSON without the message's fields) raises
there, outside any task, and Celery ends the worker: `CRITICAL celery.worker: Unrecoverable error:
JSONDecodeError` (issue 38; the same failure as kombu's filesystem transport reading a half-written file).
The payload is already off the queue and cannot become a task, so this transport logs it (the queue and
the first bytes) at ERROR and goes on with the next message.

Settings select it for redis:// and rediss:// broker URLs (CELERY_BROKER_TRANSPORT).
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import DecodeError
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Empty

logger = logging.getLogger(__name__)

# What building a message from a payload raises when the payload is not one: json's and UTF-8's decode
# errors are ValueErrors; a JSON value that is not a message dict fails on its missing keys or type.
UNDELIVERABLE = (ValueError, KeyError, TypeError, AttributeError, DecodeError)
PREVIEW_BYTES = 200


def _preview(exc: BaseException) -> str:
    doc = getattr(exc, "doc", getattr(exc, "object", None))  # JSONDecodeError, UnicodeDecodeError
    if doc is None:
        return ""
    text = doc.decode(errors="replace") if isinstance(doc, bytes) else str(doc)
    return f": {text[:PREVIEW_BYTES]!r}"


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    def _brpop_read(self, **options: Any) -> Any:
        try:
            return super()._brpop_read(**options)
        except UNDELIVERABLE as exc:
            self._drop(exc)
            raise Empty() from exc  # the loop reads the next message; the hub ignores Empty

    def _get(self, queue: Any, timeout: Any = None) -> Any:  # redis takes no timeout
        try:
            return super()._get(queue)
        except UNDELIVERABLE as exc:
            self._drop(exc, queue)
            raise Empty() from exc

    @staticmethod
    def _drop(exc: BaseException, queue: str = "") -> None:
        where = f" from queue {queue!r}" if queue else ""
        logger.error(
            "dropped a malformed broker message%s (%s: %s)%s",
            where,
            type(exc).__name__,
            exc,
            _preview(exc),
            exc_info=exc,
        )


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel
