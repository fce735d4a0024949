"""Where the trace-replay tests find the shared openb traces and workload tool (`../shared` beside the
checkout, not part of the repository), and what they do without them: skip, saying which files are
missing, or fail under `TESSERA_REQUIRE_TRACES=1` (CI), so a checkout without them cannot pass silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: `TESSERA_SHARED_DIR` overrides it (a git worktree's parent is not the checkout's).
SHARED = Path(
    os.environ.get("TESSERA_SHARED_DIR") or Path(__file__).resolve().parents[2].parent / "shared"
)
TRACE_DIR = SHARED / "traces" / "openb"
TOOL = SHARED / "tools" / "openb_workload.py"
NODE_LIST = TRACE_DIR / "openb_node_list_gpu_node.csv"


def pod_list(trace: str) -> Path:
    return TRACE_DIR / f"openb_pod_list_{trace}.csv"


def require_traces(*paths: Path) -> None:
    """Return when every path exists; otherwise skip naming the missing ones, or fail when
    TESSERA_REQUIRE_TRACES=1."""
    missing = [str(path) for path in paths if not path.exists()]
    if not missing:
        return
    message = (
        "trace replay needs the shared openb traces and workload tool (../shared beside the "
        f"checkout); missing: {', '.join(missing)}"
    )
    if os.environ.get("TESSERA_REQUIRE_TRACES") == "1":
        pytest.fail(message)
    pytest.skip(message)
