#!/usr/bin/env bash
# Stop what `make run` started (portal.supervise: the supervisor, web, beat, worker and broker, by the process
# ids under var/run/), and say which of them had died.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m portal.supervise stop
