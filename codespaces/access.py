"""Who may see and act on a codespace: the one access helper of the app.

Seeing: members of the codespace's tenant and operators (everyone else gets 404, the row is hidden).
Acting (start, stop, delete, keep): its owner, an admin of its tenant, or an operator (others: 403).
"""

from __future__ import annotations

from typing import Any

from codespaces.choices import CodespaceState
from codespaces.models import Codespace
from portal.scoping import can_admin_tenant, get_scoped_or_404


def codespace_for(user: Any, pk: Any) -> Codespace:
    """The live codespace `pk` if the user may see it, else Http404."""
    queryset = Codespace.objects.exclude(state=CodespaceState.DELETED).select_related(
        "owner", "tenant", "template", "quota__group", "workload"
    )
    return get_scoped_or_404(queryset, user, pk=pk)


def can_manage(user: Any, codespace: Codespace) -> bool:
    return codespace.owner_id == getattr(user, "pk", None) or can_admin_tenant(
        user, codespace.tenant_id
    )
