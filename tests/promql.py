"""The metric names that PromQL in deploy/ (the Grafana dashboard, the alert rules) reads, and the
series names a `/metrics` text exports, so a test can hold one against the other.

PromQL is parsed by a real parser (promql-parser, the Rust one's Python binding), after Grafana's
variables are replaced by values of the same kind; exported names come from the exposition's
`# TYPE` lines, so a labelled metric that has no sample yet (nothing refused so far) still counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import promql_parser
import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "deploy" / "grafana" / "dashboards" / "moderator.json"
ALERT_RULES = REPO / "deploy" / "prometheus-alerts.yml"

# Grafana's built-in interval variables become a duration, any other variable a plain value:
# `[$__rate_interval]` → `[5m]`, `instance=~"$instance"` → `instance=~"x"`, `vector($budget)` →
# `vector(0.05)`. The value does not matter for which metrics an expression reads.
_INTERVALS = {"__rate_interval", "__interval", "__range", "__range_s"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.DOTALL)

# How each metric type of the text exposition format names its series (prometheus-client also
# writes `<name>_created` for counters and histograms).
_SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
}


def substitute_variables(expr: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name in _INTERVALS:
            return "5m"
        return "0.05" if name == "budget" else "x"

    return _VARIABLE.sub(value, expr)


def metric_names(expr: str) -> set[str]:
    """Every metric name `expr` selects (`foo{…}`, `foo[5m]`, `{__name__="foo"}`); a Grafana
    `label_values(selector, label)` query counts as its selector."""
    if match := _LABEL_VALUES.match(expr):
        expr = match.group(1)
    tree = promql_parser.parse(substitute_variables(expr))
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            for matcher in node.matchers.matchers:
                if matcher.name == "__name__":
                    names.add(matcher.value)

    promql_parser.walk(tree, visit)
    return names


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """Each named selector of `expr`: its metric name and its equality matchers (`{result=
    "rejected"}`), the series a fresh process must already export for the query to see them."""
    found: list[tuple[str, dict[str, str]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            equal = {m.name: m.value for m in node.matchers.matchers
                     if m.op == promql_parser.MatchOp.Equal and m.name != "__name__"}  # fmt: skip
            found.append((node.name, equal))

    promql_parser.walk(promql_parser.parse(substitute_variables(expr)), visit)
    return found


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable of a dashboard."""

    def walk(node: Any, where: str) -> Iterator[tuple[str, str]]:
        if isinstance(node, dict):
            title = node.get("title") or node.get("name") or where
            if isinstance(node.get("expr"), str):
                yield f"{title} [{node.get('refId', '?')}]", node["expr"]
            for key, child in node.items():
                if key == "query" and node.get("type") == "query":
                    query = child.get("query") if isinstance(child, dict) else child
                    if isinstance(query, str):
                        yield f"variable {node.get('name')}", query
                else:
                    yield from walk(child, str(title))
        elif isinstance(node, list):
            for child in node:
                yield from walk(child, where)

    yield from walk(dashboard, dashboard.get("title", "dashboard"))


def rule_queries(rules: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(alert name, PromQL) for every rule of a Prometheus rule file."""
    for group in rules.get("groups", []):
        for rule in group.get("rules", []):
            yield rule.get("alert") or rule.get("record", "?"), rule["expr"]


def deploy_queries() -> list[tuple[str, str]]:
    """Every PromQL expression in deploy/: the dashboard's and the alert rules'."""
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(ALERT_RULES.read_text())
    return [*(("dashboard: " + w, q) for w, q in dashboard_queries(dashboard)),
            *(("alert: " + w, q) for w, q in rule_queries(rules))]  # fmt: skip


def exported_names(exposition: str) -> set[str]:
    """The series names a `/metrics` text exports, samples or not."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        suffixes = _SERIES_SUFFIXES.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
        names.update(sample.name for sample in family.samples)
    return names


def unknown_names(queries: Iterable[tuple[str, str]], known: set[str]) -> dict[str, set[str]]:
    """Per query (its `where`), the metric names it reads that are not in `known`."""
    missing: dict[str, set[str]] = {}
    for where, expr in queries:
        if unknown := metric_names(expr) - known:
            missing[where] = unknown
    return missing
