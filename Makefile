# Chat moderator: `make demo` to see it work, `make test` to check it. `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
MODEL_DIR := models/build/chat-minilm
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: help install servers model demo test lint typecheck check bench chaos report clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[model,plot,dev]'
	touch $@

APT_NEEDED = $(shell command -v redis-server >/dev/null || command -v valkey-server >/dev/null \
  || echo redis-server) $(shell command -v stunnel4 >/dev/null || command -v stunnel >/dev/null \
  || echo stunnel4)

servers:  ## Debian's redis-server, and stunnel for the TLS tests, when missing
	@[ -z "$(strip $(APT_NEEDED))" ] || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq $(APT_NEEDED) >/dev/null; }

$(MODEL_DIR)/manifest.json: | $(VENV)/.installed
	$(BIN)/moderator model build --out $(MODEL_DIR)

install: $(VENV)/.installed servers $(MODEL_DIR)/manifest.json  ## .venv, redis-server, stunnel, the default model

model: $(VENV)/.installed  ## (re)build the default model from models/data
	$(BIN)/moderator model build --out $(MODEL_DIR)

demo: install  ## embedded Kafka + Redis + moderator, drive real chat through it, print what happened
	$(BIN)/moderator demo

test: install  ## the whole test suite (starts its own broker and Redis)
	$(BIN)/pytest

lint:  ## ruff
	$(BIN)/ruff check moderator loadgen models tests
	$(BIN)/ruff format --check moderator loadgen models tests

typecheck:  ## mypy --strict on the packages
	$(BIN)/mypy

check: lint typecheck  ## lint and type-check

bench: install  ## regenerate BENCHMARKS.md (minutes; not part of the tests)
	$(BIN)/python -m loadgen.bench

chaos: install  ## fault scenarios against real processes; regenerates RELIABILITY.md (~10 min)
	$(BIN)/python -m loadgen.chaos

report: install  ## regenerate models/REPORT.md
	$(BIN)/moderator model evaluate --model $(MODEL_DIR)

clean:  ## remove the venv, caches and the built model
	rm -rf $(VENV) models/build .mypy_cache .ruff_cache .pytest_cache
