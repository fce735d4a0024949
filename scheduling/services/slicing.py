"""Where a slice may go: never on a GPU model that cannot be shared (docs/scheduling.md "Slices").

A model is whole-card only when the cluster says so (`TESSERA_WHOLE_CARD_ONLY_GPU_MODELS`) or, for a
codespace, its template does (`CodespaceTemplate.whole_card_models`). A slice that names no model is
restricted to the pool's other models, so the engine cannot pick a whole-card-only card for it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

from django.conf import settings

from portal.errors import InvalidInput


def whole_card_only_models() -> frozenset[str]:
    """The GPU models this cluster cannot slice (setting TESSERA_WHOLE_CARD_ONLY_GPU_MODELS)."""
    return frozenset(str(m) for m in settings.TESSERA_WHOLE_CARD_ONLY_GPU_MODELS)


def models_for_slice(
    *,
    pool_models: Iterable[str],
    gpu_models: Sequence[str],
    whole_card_only: Collection[str],
    pool_name: str,
    field: str = "gpu_models",
) -> list[str]:
    """The GPU models a slice request may be placed on: `gpu_models` when given (refused when one of
    them cannot be shared), else the models of the pool that can be shared (refused when there is none).
    With no whole-card-only model at all, `gpu_models` unchanged (empty = any). Raises InvalidInput
    naming `field`."""
    if not whole_card_only:
        return list(gpu_models)
    if gpu_models:
        refused = sorted({m for m in gpu_models if m in whole_card_only})
        if refused:
            message = (
                f"{', '.join(refused)} GPUs can't be shared: choose whole cards or another model."
            )
            raise InvalidInput(f"{field}: {message}", fields={field: [message]})
        return list(gpu_models)
    in_pool = sorted(set(pool_models))
    allowed = [m for m in in_pool if m not in whole_card_only]
    if not allowed:
        message = (
            f"Pool {pool_name} has no GPU model that can be shared "
            f"({', '.join(in_pool) or 'it has no GPU'}: whole cards only): choose whole cards."
        )
        raise InvalidInput(f"{field}: {message}", fields={field: [message]})
    return allowed
