#!/usr/bin/env bash
# Stop what `make run` started (the web server and the worker), by the process ids it wrote under var/run/.
set -euo pipefail
cd "$(dirname "$0")/.."
stopped=0
for name in web worker; do
  file=var/run/$name.pid
  [ -f "$file" ] || continue
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    echo "stopped $name (pid $pid)"
    stopped=1
  fi
  rm -f "$file"
done
[ "$stopped" = 1 ] || echo "Tessera was not running (nothing in var/run/)."
