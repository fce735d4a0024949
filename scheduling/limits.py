"""Bounds of what a workload or job may ask for, checked by `services.workloads` at submit.

Node labels follow Kubernetes (`portal.labels`, shared with the quota groups' node selectors): every
cycle of the pool filters nodes by them, and one job with 2,000 labels made each cycle 30 times slower
while it waited.
"""

from __future__ import annotations

from portal.operator_log import MAX_REASON_LENGTH

__all__ = ["MAX_REASON_LENGTH", "gpu_model_errors"]

MAX_GPU_MODELS = 16
MAX_GPU_MODEL_LENGTH = 63


def gpu_model_errors(models: list[str]) -> list[str]:
    """Why `models` (strings) is not a list of GPU model names; [] if it is."""
    if len(models) > MAX_GPU_MODELS:
        return [f"At most {MAX_GPU_MODELS} GPU models (got {len(models)})."]
    long = [m for m in models if len(m) > MAX_GPU_MODEL_LENGTH]
    if long:
        return [
            f"A GPU model name has at most {MAX_GPU_MODEL_LENGTH} characters (got {len(long[0])})."
        ]
    return []
