#!/usr/bin/env bash
# Run Tessera on the embedded defaults: SQLite under var/, a filesystem Celery broker, the simulated
# cluster, demo data. Idempotent: re-running keeps the data and restarts the processes.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
HOST=${TESSERA_HOST:-127.0.0.1}
PORT=${TESSERA_PORT:-8000}
mkdir -p var

$BIN/python manage.py migrate --noinput
$BIN/python manage.py seed_demo

QUEUES=$($BIN/python manage.py celery_queues)
$BIN/celery -A portal worker --beat --pool=solo -Q "$QUEUES" --loglevel=INFO \
  --schedule var/celerybeat-schedule >var/worker.log 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true' EXIT INT TERM

echo
echo "Tessera is running at http://$HOST:$PORT/  (worker log: var/worker.log; Ctrl-C stops everything)"
echo
$BIN/python manage.py runserver "$HOST:$PORT" --noreload
