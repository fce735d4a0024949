"""What deleting a codespace does, said before it is done (its one confirmation page)."""

from __future__ import annotations

from codespaces.models import Codespace
from portal.operator_log import ActionImpact


def codespace_delete_impact(codespace: Codespace) -> ActionImpact:
    """The sentence the delete confirmation shows: what stops, what is released, what is lost."""
    holds = (
        f" It stops and releases what it holds on {codespace.location}."
        if codespace.location
        else ""
    )
    return ActionImpact(
        summary=(
            f"Codespace {codespace.name} and its {codespace.home_gib} GiB home volume are deleted "
            f"for good.{holds} This cannot be undone."
        )
    )
