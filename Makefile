# Tessera: the two commands a newcomer needs.
#   make run   set up .venv, migrate, load demo data, start and supervise the embedded broker, worker, beat
#              and web (no external service; a process that dies is restarted, logs in var/*.log);
#              `make run PORT=8080` (default 8000; HOST=0.0.0.0 to listen on every interface;
#              BROKER_PORT=6390 for the embedded broker, default 6399, always on 127.0.0.1)
#   make stop  stop what `make run` started, and say which process had died
#   make test  run the whole test suite (SQLite by default; PostgreSQL when DATABASE_URL is set)
#   make kube-stack  build kube-apiserver, etcd, KWOK and Helm for tests/kubernetes (once, cached)
#   make services  install (Debian packages) and start PostgreSQL and Redis on 127.0.0.1 for the full suite
.PHONY: run stop test lint venv services kube-stack

PYTHON ?= python3
PORT ?= $(or $(TESSERA_PORT),8000)
HOST ?= $(or $(TESSERA_HOST),127.0.0.1)
BROKER_PORT ?= $(or $(TESSERA_EMBEDDED_BROKER_PORT),6399)
VENV := .venv
BIN := $(VENV)/bin

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

run: venv
	TESSERA_HOST=$(HOST) TESSERA_PORT=$(PORT) TESSERA_EMBEDDED_BROKER_PORT=$(BROKER_PORT) ./scripts/run.sh

stop:
	./scripts/stop.sh

test: venv
	$(BIN)/python -m pytest

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run

services:
	bash scripts/services.sh

# Build (once; cached outside the repo by version) the real control plane tests/kubernetes runs on.
kube-stack:
	bash scripts/kube-stack.sh build
