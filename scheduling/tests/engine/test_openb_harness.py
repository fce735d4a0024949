"""Harness validity: replay default / FGD / seed 42 end to end and match the published run bit for bit."""

from __future__ import annotations

import pytest

from bench.replay import run_one
from scheduling.tests.traces import NODE_LIST, TOOL, TRACE_DIR, pod_list, require_traces


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trace", "policy", "expected"),
    [
        ("default", "fgd", (95.14, 95.29)),  # protocol §10, reproduced by the original simulator
        ("default", "bestfit", (92.94, 93.13)),  # fgd-published-per-seed.csv
        ("default", "firstfit", (94.31, 94.50)),  # protocol §12
        ("cpu250", "fgd", (93.29, 93.51)),  # fgd-published-per-seed.csv
    ],
)
def test_replay_matches_published_seed_42(
    trace: str, policy: str, expected: tuple[float, float]
) -> None:
    require_traces(NODE_LIST, pod_list(trace), TOOL)
    result = run_one(
        {
            "trace_dir": str(TRACE_DIR),
            "tool": str(TOOL),
            "trace": trace,
            "policy": policy,
            "seed": 42,
            "log": False,
        }
    )
    assert (result["alloc100"], result["alloc130"]) == expected
    if trace == "default":
        assert result["pods"] == 10866
