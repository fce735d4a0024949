#!/usr/bin/env bash
# Run Tessera on the embedded defaults: SQLite under var/, a filesystem Celery broker, the simulated
# cluster, demo data. Idempotent: re-running keeps the data (the demo seed adds nothing twice) and
# restarts the processes. `make run PORT=8080` picks another port; `make stop` stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${TESSERA_HOST:-127.0.0.1}
PORT=${TESSERA_PORT:-8000}
mkdir -p var/run

./scripts/stop.sh >/dev/null  # a previous `make run` left running: restart, never start twice
if ! $BIN/python - "$HOST" "$PORT" <<'PY'
import socket, sys
with socket.socket() as s:
    sys.exit(s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0)
PY
then
  echo "Port $PORT on $HOST is already in use by another program: pick another one, e.g. make run PORT=8080" >&2
  exit 1
fi

$BIN/python manage.py migrate --noinput -v 0
echo "Database ready (migrations applied)."
$BIN/python manage.py seed_demo

QUEUES=$($BIN/python manage.py celery_queues)
$BIN/celery -A portal worker --beat --pool=solo -Q "$QUEUES" --loglevel=INFO \
  --schedule var/celerybeat-schedule >var/worker.log 2>&1 &
echo $! >var/run/worker.pid
trap './scripts/stop.sh >/dev/null' EXIT INT TERM

echo
echo "Tessera is running at http://$HOST:$PORT/  (users alice, bob, carol, dave, ops; password tessera-demo)"
echo "Worker log: var/worker.log. Ctrl-C or \`make stop\` stops everything; \`make run PORT=8080\` uses another port."
echo
# Django's development server; its "do not use in production" banner is hidden (the README says how to
# run in production), and it logs each request here.
DJANGO_RUNSERVER_HIDE_WARNING=true $BIN/python manage.py runserver "$HOST:$PORT" --noreload &
echo $! >var/run/web.pid
wait "$!" || [ $? -eq 143 ]  # 143: stopped by `make stop`
