"""Bounds of what a workload or job may ask for, checked by `services.workloads` at submit.

Node labels follow Kubernetes (`portal.labels`, shared with the quota groups' node selectors): every
cycle of the pool filters nodes by them, and one job with 2,000 labels made each cycle 30 times slower
while it waited.
"""

from __future__ import annotations

MAX_GPU_MODELS = 16
MAX_GPU_MODEL_LENGTH = 63
# An operator's reason (drain, GPU health), shown to the users whose workloads it requeues.
MAX_REASON_LENGTH = 500


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
