"""The peer (issue 31, item 4): a Quix Streams application doing the moderator's job, for the bench.

It reads the input topic, scores each message with the same ONNX model (`Classifier`) and the
same default policy (`Policy`: deny terms, then the model's scores), and writes one decision per
message, keyed like its input, to the decisions topic: written as Quix Streams' documentation
shows (`Application`, `app.topic`, `sdf.apply`, `sdf.to_topic`, `app.run`), one message at a
time, at-least-once. What it leaves out of the moderator's work: long messages are read up to
the model's length (no windows), no language gate, no cache, no users' rules, no review.

quixstreams pins confluent-kafka < 2.13 and pydantic < 2.14, the dev extra's and the console's
pins are newer, so the peer runs in its own target folder (`peer_site`, the `peer` extra
installed with `pip install --target`), put first on the child's PYTHONPATH; this module imports
quixstreams only in the child. Run: `python -m bench.quix_peer BOOTSTRAP IN OUT GROUP MODEL_DIR`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.artifacts import BENCH_BUILD_DIR
from moderator.config import REPO_ROOT
from moderator.decide.classifier import Classifier
from moderator.policy.rules import EMPTY_TEXT, Policy, Ruling

QUIXSTREAMS = "quixstreams==3.28.1"  # as tools/pyproject.toml's `peer` extra and constraints.txt
PEER_SITE = BENCH_BUILD_DIR / "peer-site"

# Tuned for latency as librdkafka's CONFIGURATION.md and Quix Streams' Application allow, nothing
# that weakens delivery: at-least-once, acks=all, idempotent producer (Quix's default) kept.
CONSUMER_CONFIG: dict[str, Any] = {
    "fetch.wait.max.ms": 5,  # librdkafka 500; the moderator's fetch_max_wait_ms is 5 too
    "fetch.min.bytes": 1,  # answer a fetch as soon as one byte is there (the default)
    "fetch.queue.backoff.ms": 0,  # librdkafka 1000: fetch again at once, never wait on the queue
}
PRODUCER_CONFIG: dict[str, Any] = {
    "linger.ms": 0,  # librdkafka 5: send each decision at once (the moderator's linger_ms is 0)
    "acks": "all",  # the default, stated: the moderator's producer has acks="all"
    "enable.idempotence": True,  # Quix Streams' default, stated
}
APP_SETTINGS: dict[str, Any] = {
    "processing_guarantee": "at-least-once",  # the default; exactly-once needs transactions
    "commit_interval": 1.0,  # Quix 5.0: a checkpoint (producer flush + commit) every second
    "commit_every": 0,  # no count-based checkpoint: a flush per N messages would stall the loop
    "consumer_poll_timeout": 0.1,  # Quix 1.0: only how long an idle poll blocks
    "auto_offset_reset": "earliest",  # a fresh group reads what the harness already sent
    "auto_create_topics": False,  # the bench creates the topics (4 partitions)
    "use_changelog_topics": False,  # stateless: no state store, no changelog
    "loglevel": "WARNING",
}


def app_settings(bootstrap: str, group: str) -> dict[str, Any]:
    """The keyword arguments of the peer's `quixstreams.Application`."""
    return {
        "broker_address": bootstrap,
        "consumer_group": group,
        "consumer_extra_config": dict(CONSUMER_CONFIG),
        "producer_extra_config": dict(PRODUCER_CONFIG),
        **APP_SETTINGS,
    }


def settings_table() -> list[tuple[str, str, str]]:
    """(where, setting, value) of every setting the peer sets, for BENCHMARKS.md."""
    rows = [("Application", k, repr(v)) for k, v in APP_SETTINGS.items()]
    rows += [("consumer (librdkafka)", k, repr(v)) for k, v in CONSUMER_CONFIG.items()]
    rows += [("producer (librdkafka)", k, repr(v)) for k, v in PRODUCER_CONFIG.items()]
    return rows


class Decider:
    """One message in, its decision record out: the model and the policy as the moderator uses
    them, one message per model call (the way a per-message `sdf.apply` calls it)."""

    def __init__(self, model_dir: Path, *, threads: int, policy: Policy | None = None) -> None:
        self.classifier = Classifier(model_dir, threads=threads)
        self.classifier.warm_up(1)
        self.policy = policy or Policy.load()
        self.model = self.classifier.info.ident

    def __call__(self, message: Mapping[str, Any]) -> dict[str, Any]:
        started = time.monotonic()
        text = self.policy.without_allowed(str(message.get("text", "")))
        verdict = self.policy.deny_ruling(text)
        scores: dict[str, float] = {}
        if verdict is None:
            (ids,) = self.classifier.encode([text])
            if self.classifier.has_content(ids):
                scores = self.classifier.as_dict(self.classifier.score_ids([ids])[0])
                verdict = self.policy.decide(scores)
            else:
                verdict = EMPTY_TEXT
        score_ms = (time.monotonic() - started) * 1000
        return decision(message, verdict, scores, model=self.model, policy=self.policy.ident,
                        score_ms=score_ms, now_ms=int(time.time() * 1000))  # fmt: skip


def decision(
    message: Mapping[str, Any],
    verdict: Ruling,
    scores: Mapping[str, float],
    *,
    model: str,
    policy: str,
    score_ms: float,
    now_ms: int,
) -> dict[str, Any]:
    """The decision record (moderator/schemas/decision.schema.json) of `message`: what the
    moderator writes for a message it scored, without the parts the peer does not do (no
    cache, no review, no users' rules: their fields at their neutral values)."""
    rounded = round(score_ms, 3)
    return {
        "message_id": message["message_id"],
        "channel_id": message.get("channel_id", ""),
        "user_id": message.get("user_id", ""),
        "action": verdict.action,
        "reason": verdict.reason,
        "severity": verdict.severity,
        "scores": {label: round(float(v), 4) for label, v in scores.items()},
        "model": model,
        "policy": policy,
        "cached": False,
        "degraded": False,
        "latency_ms": {"queue": 0.0, "score": rounded, "total": rounded},
        "over_budget": False,
        "decided_at_ms": now_ms,
        "span": [0, len(str(message.get("text", "")))],  # one window: the whole text
        "truncated": False,
        "final": False,
        "strikes": 0,
        "escalated": False,
    }


def child_env(site: Path = PEER_SITE) -> dict[str, str]:
    """This process's environment with `site` (quixstreams and its older pins) first on the
    path, then the checkout."""
    env = dict(os.environ)
    path = [str(site), str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env.update(PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1")
    return env


def ensure_site(site: Path = PEER_SITE) -> Path:
    """`site` with quixstreams installed into it (once; pip is quick when it is there)."""
    if not (site / "quixstreams").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site),
                        QUIXSTREAMS], check=True)  # fmt: skip
    return site


def start(
    bootstrap: str, in_topic: str, out_topic: str, group: str, model_dir: Path, *, threads: int
) -> subprocess.Popen[bytes]:
    """The peer as a child process (its own interpreter: its own pins, its own CPU)."""
    args = [sys.executable, "-m", "bench.quix_peer", bootstrap, in_topic, out_topic, group,
            str(model_dir), "--threads", str(threads)]  # fmt: skip
    return subprocess.Popen(args, env=child_env(ensure_site()), cwd=REPO_ROOT)


def run_app(args: argparse.Namespace) -> None:  # pragma: no cover - runs in the child
    from quixstreams import Application

    decide = Decider(args.model_dir, threads=args.threads)
    app = Application(**app_settings(args.bootstrap, args.group))
    messages = app.topic(args.in_topic, value_deserializer="json")
    decisions = app.topic(args.out_topic, value_serializer="json")
    sdf = app.dataframe(messages)
    sdf = sdf.apply(decide)
    sdf.to_topic(decisions)
    app.run()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.quix_peer", description=__doc__)
    p.add_argument("bootstrap")
    p.add_argument("in_topic")
    p.add_argument("out_topic")
    p.add_argument("group")
    p.add_argument("model_dir", type=Path)
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    run_app(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
