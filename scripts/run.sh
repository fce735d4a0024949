#!/usr/bin/env bash
# Run Tessera on the embedded defaults: SQLite under var/, the embedded Valkey broker (portal.embedded_broker),
# the simulated cluster, demo data. Idempotent: re-running keeps the data (the demo seed adds nothing twice)
# and restarts the processes. `make run PORT=8080` picks another port (BROKER_PORT=6390 the broker's);
# `make stop` stops everything. portal.supervise starts and restarts the broker, worker, beat and web.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${TESSERA_HOST:-127.0.0.1}
PORT=${TESSERA_PORT:-8000}
mkdir -p var/run

./scripts/stop.sh >/dev/null  # a previous `make run` left running: restart, never start twice
port_free() {
  $BIN/python - "$1" "$2" <<'PY'
import socket, sys
with socket.socket() as s:
    sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0)
PY
}
if ! port_free "$HOST" "$PORT"; then
  echo "Port $PORT on $HOST is already in use by another program: pick another one, e.g. make run PORT=8080" >&2
  exit 1
fi
if [ -z "${CELERY_BROKER_URL:-}" ] && ! port_free 127.0.0.1 "${TESSERA_EMBEDDED_BROKER_PORT:-6399}"; then
  echo "Port ${TESSERA_EMBEDDED_BROKER_PORT:-6399} (the embedded broker's) is already in use by another program:" \
    "pick another one, e.g. make run BROKER_PORT=6390" >&2
  exit 1
fi

QUEUES=$($BIN/python manage.py celery_queues)
echo "Tessera starts at http://$HOST:$PORT/  (users alice, bob, carol, dave, ops; password tessera-demo)"
echo "Logs (appended): var/worker.log, var/beat.log, var/broker.log. A process that dies is restarted."
echo "Ctrl-C or \`make stop\` stops everything; \`make run PORT=8080\` uses another port."
echo
# The broker starts first: migrate and the demo seed run once it answers (the seed sends tasks).
exec $BIN/python -m portal.supervise run --host "$HOST" --port "$PORT" --queues "$QUEUES" \
  --setup "migrate --noinput -v 0" --setup seed_demo
