"""What other apps tell defragmentation, without scheduling importing them (like `scheduling.observers`).

- `register_movability(kind, provider)`: `provider(workload_ids)` returns, for each workload of that kind it
  knows, None when it may move or a sentence saying why not (codespaces: the template forbids it, or it is in
  use and its owner has not consented). A workload of a kind without a provider is never moved: moving it
  safely needs its app's word.
- `register_move_listener(kind, listener)`: `listener(notices)` is called inside the apply transaction before
  the moves (`stage="before"`) and after them (`stage="after"`), so the owner's page says why it moved in the
  same commit as the move itself (codespaces write a timeline notice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MoveNotice:
    """One move as its owner is told: before (`to_node` is where it will restart) or after."""

    workload_id: int
    plan_id: int
    stage: str  # "before" | "after"
    reason: str
    from_node: str
    to_node: str


MovabilityProvider = Callable[[Sequence[int]], Mapping[int, "str | None"]]
MoveListener = Callable[[Sequence[MoveNotice]], None]

_providers: dict[str, MovabilityProvider] = {}
_listeners: dict[str, list[MoveListener]] = {}


def register_movability(kind: str, provider: MovabilityProvider) -> None:
    """The one provider of `kind` (registering again replaces it)."""
    _providers[str(kind)] = provider


def register_move_listener(kind: str, listener: MoveListener) -> None:
    listeners = _listeners.setdefault(str(kind), [])
    if listener not in listeners:
        listeners.append(listener)


def refusals(kind: str, workload_ids: Sequence[int]) -> dict[int, str]:
    """Why each of `workload_ids` (all of `kind`) may not move; those absent may."""
    ids = list(workload_ids)
    if not ids:
        return {}
    provider = _providers.get(str(kind))
    if provider is None:
        return dict.fromkeys(ids, f"no app vouches that a {kind} can be moved safely")
    answers = provider(ids)
    out: dict[int, str] = {}
    for i in ids:
        if i not in answers:
            out[i] = f"its {kind} is not known"
        elif (why := answers[i]) is not None:
            out[i] = why
    return out


def tell(kind: str, notices: Sequence[MoveNotice]) -> None:
    """Call the listeners of `kind` (inside the caller's transaction: a listener that raises undoes the
    apply, so no move is made without its notice)."""
    for listener in list(_listeners.get(str(kind), [])):
        listener(list(notices))
