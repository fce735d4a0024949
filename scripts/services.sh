#!/usr/bin/env bash
# Install (from Debian's packages) and start the two services the full test suite and a production-like
# run need: PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379. Idempotent: a second run only
# checks that both answer. Used by `make services` and `.ci/run`.
#
# What it changes on the machine, and nothing else:
#   - apt installs `postgresql` and `redis-server` when their binaries are missing;
#   - the Debian PostgreSQL cluster (`main` of the installed major version) is created when there is none,
#     listens on 127.0.0.1 only (conf.d/tessera.conf), and its `pg_hba.conf` gains two lines, marked
#     "tessera services", that let the `postgres` role in over loopback TCP without a password (the
#     URL tests and benchmarks use: postgres://postgres@127.0.0.1:5432/...). Loopback only: this is a
#     development and CI service, never a production one;
#   - redis-server is started bound to 127.0.0.1 with persistence off (tests keep nothing in it).
#
# Environment: TESSERA_PG_FAST=1 also turns off fsync/synchronous_commit/full_page_writes (a throwaway
# CI database: a crash may lose it, which is fine there and nowhere else).
set -euo pipefail

PG_PORT=5432
REDIS_PORT=6379
MARK="# tessera services"

if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
else
  command -v sudo >/dev/null 2>&1 || { echo "services: run as root or install sudo" >&2; exit 1; }
  as_root() { sudo "$@"; }
fi
say() { printf 'services: %s\n' "$*"; }

wait_for() {  # wait_for SECONDS COMMAND...: true once COMMAND succeeds
  local seconds=$1; shift
  for _ in $(seq 1 "$seconds"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
  "$@" >/dev/null 2>&1
}

# --- packages -----------------------------------------------------------------------------------------
missing=()
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- PostgreSQL -----------------------------------------------------------------------------------------
pg_ok() { psql "postgres://postgres@127.0.0.1:${PG_PORT}/postgres" -XAtqc 'select 1' >/dev/null 2>&1; }

if ! pg_ok; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
  if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q .; then
    say "creating PostgreSQL ${version} cluster main"
    as_root pg_createcluster "$version" main --port "$PG_PORT" >/dev/null
  fi
  conf=/etc/postgresql/$version/main
  settings="listen_addresses = '127.0.0.1'
port = ${PG_PORT}
max_connections = 200"
  if [ "${TESSERA_PG_FAST:-0}" = 1 ]; then
    settings="$settings
fsync = off
synchronous_commit = off
full_page_writes = off"
  fi
  printf '%s\n%s\n' "$MARK: written by scripts/services.sh" "$settings" | as_root tee "$conf/conf.d/tessera.conf" >/dev/null
  if ! as_root grep -q "$MARK" "$conf/pg_hba.conf"; then
    say "letting the postgres role in over loopback ($conf/pg_hba.conf)"
    hba=$(mktemp)
    { printf '%s: the postgres role over loopback TCP, for tests and benchmarks\n' "$MARK"
      printf 'host all postgres 127.0.0.1/32 trust %s\n' "$MARK"
      printf 'host all postgres ::1/128 trust %s\n' "$MARK"
      as_root cat "$conf/pg_hba.conf"; } >"$hba"
    as_root install -m 640 -o postgres -g postgres "$hba" "$conf/pg_hba.conf"
    rm -f "$hba"
  fi
  status=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}')
  if [ "$status" = online ]; then
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  else
    as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start
  fi
  wait_for 30 pg_ok || {
    echo "services: PostgreSQL does not answer on 127.0.0.1:${PG_PORT}" >&2
    as_root tail -n 20 "/var/log/postgresql/postgresql-${version}-main.log" >&2 || true
    exit 1
  }
fi
# The database the README's DATABASE_URL names (tests create their own test_* databases beside it).
if [ "$(psql "postgres://postgres@127.0.0.1:${PG_PORT}/postgres" -XAtqc "select count(*) from pg_database where datname = 'tessera'")" = 0 ]; then
  psql "postgres://postgres@127.0.0.1:${PG_PORT}/postgres" -XAtqc 'create database tessera' >/dev/null
fi
say "PostgreSQL answers on 127.0.0.1:${PG_PORT} ($(psql "postgres://postgres@127.0.0.1:${PG_PORT}/postgres" -XAtqc 'show server_version'))"

# --- Redis ------------------------------------------------------------------------------------------------
redis_ok() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
if ! redis_ok; then
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/tessera.log
  wait_for 30 redis_ok || {
    echo "services: Redis does not answer on 127.0.0.1:${REDIS_PORT}" >&2
    as_root tail -n 20 /var/log/redis/tessera.log >&2 || true
    exit 1
  }
fi
say "Redis answers on 127.0.0.1:${REDIS_PORT} ($(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" info server | awk -F: '/^redis_version/ {print $2}' | tr -d '\r'))"
