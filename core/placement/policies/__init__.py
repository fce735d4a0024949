"""Placement policies behind one interface (:class:`.base.Policy`), built by name from :data:`POLICIES`."""

from __future__ import annotations

from collections.abc import Mapping

from .base import Policy, PolicyFactory
from .bestfit import make_bestfit
from .dotproduct import make_dotproduct
from .fgd import make_fgd
from .firstfit import make_firstfit
from .gpuclustering import make_gpuclustering
from .gpupacking import make_gpupacking
from .random import make_random
from .tessera import make_tessera

#: Policy name -> factory ``(typical=..., seed=...) -> Policy``.
POLICIES: Mapping[str, PolicyFactory] = {
    "random": make_random,
    "firstfit": make_firstfit,
    "bestfit": make_bestfit,
    "dotproduct": make_dotproduct,
    "gpupacking": make_gpupacking,
    "gpuclustering": make_gpuclustering,
    "fgd": make_fgd,
    "tessera": make_tessera,
}

__all__ = ["POLICIES", "Policy", "PolicyFactory"]
