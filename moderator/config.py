"""The one configuration object, read from the environment (and matching flags) in one place."""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moderator.errors import ConfigError
from moderator.redaction import redact_url, redis_url_problem, url_secrets
from moderator.threads import cpu_list

ENV_PREFIX = "MODERATOR_"
REPO_ROOT = Path(__file__).resolve().parent.parent
# The shipped default model: package data, so an installed (not only an editable) moderator has
# it. `make model` rebuilds it in models/build/ and copies it here (`python -m models ship`).
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default_model"
DEFAULT_THREADS = 4


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
OFFSET_RESETS = ("earliest", "latest")
_TOPIC_ROLES = (
    *("in", "out", "dlq", "policy", "review", "verdict", "override", "audit", "shadow", "rollout"),
)
TOPICS = tuple(f"{role}_topic" for role in _TOPIC_ROLES)  # checked in this order
OPTIONAL_TOPICS = (  # empty: off
    *("policy_topic", "override_topic", "audit_topic", "shadow_topic", "rollout_topic"),
)
# What a late cache miss gets under overload (decide/degrade.py); `off` waits for the model.
DEGRADED_MODES = ("off", "allow", "block", "lexical")

HELP = {
    "kafka_bootstrap": "Kafka bootstrap servers, comma-separated",
    "in_topic": "inbound chat messages topic",
    "out_topic": "outbound decisions topic",
    "dlq_topic": "dead-letter topic for bad records",
    "group_id": "Kafka consumer group",
    "auto_offset_reset": "where a group with no committed offset starts: earliest (the whole "
    "retained topic) | latest (new messages only; on the embedded Tansu broker, also the rest of "
    "each partition's last batch: README, Configuration)",
    "redis_url": "verdict cache; empty disables it",
    "model_dir": "model directory (model.onnx, tokenizer.json, manifest.json); the shipped "
    "default model if unset",
    "policy": "policy file (TOML or JSON); the default policy if unset",
    "policy_topic": "compacted topic of per-channel policies (key: channel id, or * for the "
    "default), read whole at start and followed; empty: only the policy file",
    "review_topic": "topic of review records: every review decision with its channel's context",
    "verdict_topic": "topic of moderators' verdicts on held messages (key: message id)",
    "review_context": "messages of the channel before a held one, sent with it (0: none)",
    "review_context_bytes": "UTF-8 bytes of context texts sent with a held message, at most",
    "override_topic": "compacted topic of moderators' overrides, replayed and followed; empty: off",
    "audit_topic": "append-only topic of who gave verdicts and changed overrides; empty: off",
    "threads": "threads the model scores on (capped at the cores we may use)",
    "batch_threads": "intra-op threads one batch runs on; threads // batch_threads batches "
    "run at once",
    "budget_ms": "latency budget per message, from its send time",
    "metrics_port": "port for /metrics, /healthz, /readyz (0 picks one)",
    "metrics_host": "address the metrics endpoint binds to",
    "max_batch": "largest micro-batch the model scores at once",
    "max_in_flight": "messages fetched but not yet acknowledged, at most",
    "max_windows": "model windows read per message (past it: the first N-1 and the last)",
    "max_record_bytes": "inbound records larger than this are dead-lettered",
    "cache_ttl_s": "time-to-live of verdicts in Redis",
    "l1_cache_size": "entries in the in-process verdict cache (0 disables it)",
    "redis_timeout_ms": "give up on a Redis call after this long",
    "user_state_timeout_ms": "give up on a users' state call to Redis after this long",
    "commit_interval_s": "how often acknowledged offsets are committed",
    "fetch_max_wait_ms": "longest the broker may hold a fetch for data (Tansu: every fetch)",
    "fetch_min_bytes": "bytes Apache Kafka gathers before it answers a fetch (Tansu: ignored)",
    "fetch_linger_max_ms": "wait to gather a batch the rate and budget afford, at most; 0: off",
    "shutdown_timeout_s": "deadline to finish in-flight work on shutdown",
    "session_timeout_ms": "a silent group member loses its partitions after this long "
    "(shorter: faster take-over after a crash; too short: needless rebalances)",
    "publish_attempts": "refusals of a record (INVALID_RECORD, too large), sent alone while its "
    "topic takes others, before it is diverted to the dead-letter topic; 0: re-send forever",
    "topic_partitions": "partitions of the in and out topics --create-topics makes (DLQ: 1)",
    "topic_replication": "replicas of each topic the moderator creates (policies, --create-topics)",
    "kafka_security_protocol": "PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL",
    "kafka_sasl_mechanism": "PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (with SASL_*)",
    "kafka_sasl_username": "SASL user name",
    "kafka_sasl_password": "SASL password (never logged)",
    "kafka_ssl_cafile": "CA bundle to verify the brokers (with SSL / SASL_SSL)",
    "kafka_ssl_certfile": "client certificate for mutual TLS",
    "kafka_ssl_keyfile": "client private key for mutual TLS",
    "degraded_mode": "late cache misses skip the model: " + " | ".join(DEGRADED_MODES),
    "denylist": "phrases the lexical degraded mode blocks; the packaged list if unset",
    "shadow_model": "a second model directory that scores every message beside the primary, off "
    "its path, and is compared with it (never published as a decision); unset: no shadow",
    "shadow_topic": "topic of the shadow's disagreements with the primary, kept 7 days; empty: "
    "counted only",
    "shadow_threads": "ONNX threads of the shadow model's own process",
    "shadow_cpus": "CPUs the shadow's process may run on (1, 0,2 or 2-3); empty: any",
    "shadow_queue": "messages waiting for the shadow, at most; past it they are skipped (counted)",
    "rollout_topic": "compacted control topic naming which model decides and which shadows it, "
    "read whole at start and followed; empty: the model settings only",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated settings of one moderator process. Build with `Settings.from_env()`."""

    kafka_bootstrap: str = "127.0.0.1:9092"
    in_topic: str = "chat.messages"
    out_topic: str = "chat.decisions"
    dlq_topic: str = "chat.messages.dlq"
    group_id: str = "moderator"
    auto_offset_reset: str = "earliest"
    redis_url: str = "redis://127.0.0.1:6379/0"
    model_dir: Path = DEFAULT_MODEL_DIR
    policy: Path | None = None
    policy_topic: str = "chat.policies"
    review_topic: str = "chat.review"
    verdict_topic: str = "chat.verdicts"
    review_context: int = 5
    review_context_bytes: int = 4096
    override_topic: str = "chat.overrides"
    audit_topic: str = "chat.audit"
    threads: int = DEFAULT_THREADS
    batch_threads: int = 1
    budget_ms: float = 50.0
    metrics_port: int = 9108
    metrics_host: str = "127.0.0.1"
    max_batch: int = 8
    max_in_flight: int = 2000
    max_windows: int = 16
    max_record_bytes: int = 65536
    cache_ttl_s: int = 86400
    l1_cache_size: int = 100_000
    redis_timeout_ms: float = 25.0
    user_state_timeout_ms: float = 250.0  # a miss splits users' state: more than a cache miss
    commit_interval_s: float = 0.5
    fetch_max_wait_ms: int = 5  # Tansu's need (dev stack, tests); deployments set theirs
    fetch_min_bytes: int = 1
    fetch_linger_max_ms: float = 10.0
    shutdown_timeout_s: float = 15.0
    session_timeout_ms: int = 6_000  # the least a stock Kafka broker accepts
    publish_attempts: int = 5
    topic_partitions: int = 4
    topic_replication: int = 1
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str = "PLAIN"
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = field(default="", repr=False)
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    degraded_mode: str = "off"
    denylist: Path | None = None
    shadow_model: Path | None = None
    shadow_topic: str = "chat.shadow"
    shadow_threads: int = 1
    shadow_cpus: frozenset[int] = frozenset()  # any
    shadow_queue: int = 1000
    rollout_topic: str = "chat.rollout"

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"{ENV_PREFIX}{name.upper()}: {why}")

        if not self.kafka_bootstrap.strip():
            raise bad("kafka_bootstrap", "must name at least one broker host:port")
        for hostport in self.kafka_bootstrap.split(","):
            host, _, port = hostport.strip().rpartition(":")
            if not host or not port.isdigit():
                raise bad("kafka_bootstrap", f"{hostport!r} is not host:port")
        for name in (*TOPICS, "group_id"):
            if name not in OPTIONAL_TOPICS and not getattr(self, name).strip():
                raise bad(name, "must not be empty")
        if len({self.in_topic, self.out_topic, self.dlq_topic}) != 3:
            raise bad("in_topic", "the inbound, outbound and dead-letter topics must differ")
        for i, name in enumerate(TOPICS[3:], 3):  # each optional topic differs from the above
            if (topic := getattr(self, name).strip()) and topic in [
                getattr(self, n) for n in TOPICS[:i]
            ]:
                raise bad(name, "must differ from the other topics")
        if self.redis_url and (problem := redis_url_problem(self.redis_url)):
            raise bad("redis_url", problem)
        positive = ("threads", "batch_threads", "budget_ms", "max_batch", "max_in_flight",
                    "max_windows", "max_record_bytes", "cache_ttl_s", "redis_timeout_ms",
                    "user_state_timeout_ms", "commit_interval_s", "shutdown_timeout_s",
                    "topic_partitions", "topic_replication", "review_context_bytes",
                    "shadow_threads", "shadow_queue", "fetch_min_bytes")  # fmt: skip
        for name in positive:
            if getattr(self, name) <= 0:
                raise bad(name, f"must be greater than 0, got {getattr(self, name)}")
        if self.session_timeout_ms < 1000:
            raise bad("session_timeout_ms", f"must be at least 1000, got {self.session_timeout_ms}")
        nonnegative = ("l1_cache_size", "fetch_max_wait_ms", "fetch_linger_max_ms",
                       "publish_attempts", "review_context")  # fmt: skip
        for name in nonnegative:
            if getattr(self, name) < 0:
                raise bad(name, f"must not be negative, got {getattr(self, name)}")
        if not 0 <= self.metrics_port <= 65535:
            raise bad("metrics_port", f"{self.metrics_port} is not a TCP port")
        if self.kafka_security_protocol not in KAFKA_PROTOCOLS:
            raise bad("kafka_security_protocol", f"must be one of {', '.join(KAFKA_PROTOCOLS)}")
        if self.kafka_security_protocol.startswith("SASL"):
            if self.kafka_sasl_mechanism not in SASL_MECHANISMS:
                raise bad("kafka_sasl_mechanism", f"must be one of {', '.join(SASL_MECHANISMS)}")
            if not self.kafka_sasl_username or not self.kafka_sasl_password:
                raise bad("kafka_sasl_username", "SASL needs a user name and a password")
        for name in ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise bad(name, f"{path} is not a file")
        if self.auto_offset_reset not in OFFSET_RESETS:
            raise bad("auto_offset_reset", f"{self.auto_offset_reset!r} is not earliest|latest")
        if self.degraded_mode not in DEGRADED_MODES:
            raise bad("degraded_mode", f"{self.degraded_mode!r} is not {'|'.join(DEGRADED_MODES)}")
        if self.denylist is not None and not self.denylist.is_file():
            raise bad("denylist", f"{self.denylist} is not a file")
        if self.policy is not None and not self.policy.is_file():
            raise bad("policy", f"{self.policy} is not a file")
        if self.shadow_model is not None and not (self.shadow_model / "manifest.json").is_file():
            raise bad("shadow_model", f"{self.shadow_model} has no manifest.json")

    def __repr__(self) -> str:
        """Settings without secrets: no SASL password, no password in the Redis URL."""
        shown = []
        for f in dataclasses.fields(self):
            if not f.repr:
                continue
            value = getattr(self, f.name)
            if f.name == "redis_url":
                value = redact_url(value)
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"

    def secrets(self) -> list[str]:
        """Every secret these settings hold, for scrubbing logs and error messages."""
        return [self.kafka_sasl_password, *url_secrets(self.redis_url)]

    def consumer_timeouts(self) -> dict[str, int]:
        """The consumer's group timeouts. Heartbeats go every third of the session; a rebalance
        may last as long as draining revoked partitions can (`shutdown_timeout_s`), or the member
        is dropped mid-hand-over; requests (a JoinGroup waits out the rebalance) outlast both."""
        session = self.session_timeout_ms
        rebalance = max(session, int(self.shutdown_timeout_s * 1000) + 5000)
        return {
            "session_timeout_ms": session,
            "heartbeat_interval_ms": max(session // 3, 300),
            "rebalance_timeout_ms": rebalance,
            "request_timeout_ms": max(40_000, rebalance + 5000),
        }

    def kafka_options(self) -> dict[str, Any]:
        """Connection options shared by every Kafka client (consumer, producer, admin)."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap,
            "security_protocol": self.kafka_security_protocol,
        }
        if self.kafka_security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context(
                cafile=str(self.kafka_ssl_cafile) if self.kafka_ssl_cafile else None,
                certfile=str(self.kafka_ssl_certfile) if self.kafka_ssl_certfile else None,
                keyfile=str(self.kafka_ssl_keyfile) if self.kafka_ssl_keyfile else None,
            )
        if self.kafka_security_protocol.startswith("SASL"):
            options.update(
                sasl_mechanism=self.kafka_sasl_mechanism,
                sasl_plain_username=self.kafka_sasl_username,
                sasl_plain_password=self.kafka_sasl_password,
            )
        return options

    @property
    def effective_threads(self) -> int:
        """Threads the model actually uses: the setting, capped at the cores we may use."""
        return max(1, min(self.threads, available_cores()))

    @property
    def scoring_layout(self) -> tuple[int, int]:
        """(intra-op threads per batch, batches at once) within `effective_threads`.

        One thread per batch by default: a batch split over threads waits, at every operator,
        for its slowest thread, and on a few cores shared with the event loop and the broker
        client one of them is often descheduled; separate batches never wait for each other."""
        per_batch = min(self.batch_threads, self.effective_threads)
        return per_batch, max(1, self.effective_threads // per_batch)

    def check_model_dir(self) -> None:
        """Fail early, naming the setting, when the model directory is missing."""
        if not (self.model_dir / "manifest.json").is_file():
            raise ConfigError(
                f"{ENV_PREFIX}MODEL_DIR: {self.model_dir} has no manifest.json "
                "(a model directory holds model.onnx, tokenizer.json and manifest.json)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from `MODERATOR_*` variables; `overrides` (e.g. flags) win over them."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            env_name = ENV_PREFIX + f.name.upper()
            if overrides.get(f.name) is not None:
                raw: Any = overrides[f.name]
            elif env_name in environ:
                raw = environ[env_name]
            else:
                continue
            values[f.name] = _convert(f, raw, env_name)
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


# How a string from the environment or a flag becomes each setting, by its resolved type.
_PARSERS: dict[object, Callable[[str], Any]] = {
    int: int,
    float: float,
    Path: lambda raw: Path(raw).expanduser(),
    Path | None: lambda raw: Path(raw).expanduser() if raw else None,
    frozenset[int]: lambda raw: cpu_list(raw) if raw.strip() else frozenset(),
}
_TYPES = typing.get_type_hints(Settings)


def _convert(f: dataclasses.Field[Any], raw: Any, env_name: str) -> Any:
    kind = _TYPES[f.name]
    parse = _PARSERS.get(kind)
    if parse is None or not isinstance(raw, str):
        return raw
    try:
        return parse(raw)
    except ValueError:
        name = (
            "CPU list (1, 0,2 or 2-3)"
            if kind == frozenset[int]
            else getattr(kind, "__name__", kind)
        )
        raise ConfigError(f"{env_name}: {raw!r} is not a valid {name}") from None
