"""Keep a worker's long-lived objects out of Python's full garbage collections.

A worker holds the cycle's warm readings (the engine state of a pool, its capacity, its nodes: hundreds
of thousands of objects on a large cluster). Python's collector walks every tracked object on a full
(generation 2) collection, which it starts by itself once enough new objects survived: on a 500-node
pool one such collection inside a reclaim took 0.17 s of a 0.7 s response. So when a burst has ended
(the first idle cycle after busy ones), the worker collects once and freezes what survives
(`gc.freeze`): later collections skip those objects, and the next burst is not stalled by them.

Nothing leaks for long: the next settle unfreezes first, so garbage that was frozen is collected then.
At most one settle per `TESSERA_GC_SETTLE_SECONDS` (0 turns it off).
"""

from __future__ import annotations

import gc
import threading
import time

from django.conf import settings

_lock = threading.Lock()
_state = {"busy": True, "settled_at": float("-inf")}


def note_busy() -> None:
    """A cycle did work: the next idle cycle may settle the heap."""
    _state["busy"] = True


def settle_after_burst(now: float | None = None) -> bool:
    """At an idle moment: when work was done since the last settle and the interval has passed,
    collect everything, then freeze the survivors. Returns whether it settled."""
    interval = float(getattr(settings, "TESSERA_GC_SETTLE_SECONDS", 0) or 0)
    if interval <= 0:
        return False
    at = time.monotonic() if now is None else now
    with _lock:
        if not _state["busy"] or at - float(_state["settled_at"]) < interval:
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _state["busy"] = False
        _state["settled_at"] = at
    return True
