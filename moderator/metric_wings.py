"""What each wing of the moderator counts, its labelled series bound once.

A wing follows a message's path: Kafka in and out, deciding (with the score cache), the users'
rules, channel policies, review. Each module gets its wing's object and calls `.inc()`,
`.set()` or `.observe()` on a child bound at construction, never `.labels()` per message (it
validates and locks on every call). All wings register on one registry (moderator/metrics.py),
under the names, help texts, label names and buckets the dashboard and the alerts read; every
label value known in advance has its series at 0 from the start.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from moderator.metric_families import ByLabel, Families, Wing

LATENCY_BUCKETS_S = (
    *(0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03),
    *(0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5),
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
WINDOW_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)  # windows per message (cap 16 by default)
# Send to decision: fine around a tens-of-milliseconds budget, coarse out to a minute-old backlog.
END_TO_END_BUCKETS_S = (
    *(0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0),
    *(2.5, 5.0, 10.0, 30.0, 60.0),
)

# Every value each labelled metric can take, so its series exist at 0 from the start: a series
# born at 1 has no increase() to see, and an alert on it stays silent on the first event.
# Policies may name more actions than these defaults; those series appear when first counted.
DEFAULT_ACTIONS = ("allow", "nudge", "review", "block")  # moderator/policy/rules.py DEFAULT_ACTIONS
DEAD_LETTER_REASONS = (  # moderator/schemas/dead-letter-headers.schema.json's enum
    *("empty_value", "too_large", "not_utf8", "invalid_json", "not_object"),
    *("missing_field", "wrong_type", "empty_field", "publish_failed"),
    *("invalid_verdict", "verdict_not_held"),  # verdicts (moderator/review/verdicts.py)
)
REFUSED_OUTCOMES = ("decision", "dead_letter", "receipt")
POLICY_RESULTS = ("applied", "removed", "rejected")
VERDICT_OUTCOMES = ("applied", "late", "not_held", "timed_out", "invalid")
# What holds a message besides a model label (the reason's head: `unsupported_language:fr`).
HOLD_REASONS = ("truncated", "unsupported_language", "deny", "escalated", "none")
OVERRIDE_ACTIONS = ("allow", "nudge", "block")  # review/overrides.py ACTIONS (a verdict's)
USER_RULES = ("muted", "rate_limited", "spam", "link", "escalated")  # moderator/users/escalation.py
USER_STEPS = ("before", "after")
# Who makes a Redis round trip besides the users' state (its own counter, by step): the score
# cache's reads (one MGET per batch with L1 misses) and background writes, the per-batch hold
# (context rings and held messages), a verdict applied, and the timeout sweep.
REDIS_PARTS = ("cache_read", "cache_write", "review", "verdict", "sweep")

_TOPIC_PARTITION = ("topic", "partition")


class KafkaMetrics(Wing):
    """Records in (intake: fetched, in flight, commits, lag) and out (the publisher)."""

    def __init__(self, f: Families) -> None:
        super().__init__(f)
        self.consumed = f.counter("messages_consumed", "Inbound records fetched")
        self.decisions = ByLabel(
            f.counter("decisions", "Decisions published, by action", "action"), *DEFAULT_ACTIONS
        )
        self.dead_letters = ByLabel(
            f.counter("dead_letters", "Records sent to the dead-letter topic", "reason"),
            *DEAD_LETTER_REASONS,
        )
        self.in_flight = f.gauge("in_flight", "Messages fetched and not yet acknowledged")
        # The pacing of fetches (moderator/kafka/pacing.py): what it chose and what it got.
        self.fetch_linger_ms = f.gauge(
            "fetch_linger_ms", "The wait the latest fetch was allowed to gather a batch (0: none)"
        )
        self.fetch_target = f.gauge("fetch_target", "Records the latest fetch set out to gather")
        self.arrival_rate = f.gauge("arrival_rate", "Records fetched a second, as pacing sees it")
        self.fetched_batch = f.histogram(
            "fetched_batch_size", "Records per fetched batch (one pipeline task)", BATCH_BUCKETS
        )
        self.consumer_lag = ByLabel(  # by (topic, partition): the partitions assigned
            f.gauge(
                "consumer_lag", "Records behind the partition's high-water mark", *_TOPIC_PARTITION
            )
        )
        self.publish_retries = f.counter("publish_retries", "Decision or dead-letter re-sends")
        self.publish_refused = ByLabel(
            f.counter(
                "publish_refused",
                "Outcomes the broker refused for good, diverted to the dead-letter topic",
                "outcome",
            ),
            *REFUSED_OUTCOMES,
        )
        commits = f.counter("commits", "Offset commits", "result")
        self.commit_ok, self.commit_failed = commits.labels("ok"), commits.labels("failed")
        self.review_records = f.counter(
            "review_records", "Review records published (one per review decision)"
        )


class RedisMetrics(Wing):
    """The Redis client's health, shared by the wings that make round trips."""

    def __init__(self, f: Families) -> None:
        super().__init__(f)
        self.errors = f.counter("redis_errors", "Failed or timed-out Redis calls")
        self.up = f.gauge("redis_up", "1 while the Redis circuit breaker is closed")
        self.round_trips = f.counter(
            "redis_round_trips",
            "Redis calls (a command, a pipeline or a script: one round trip each) by part: "
            "cache_read, cache_write, review, verdict, sweep (users' state: "
            "user_state_round_trips)",
            "part",
        )


class DecideMetrics(Wing):
    """Deciding: the stages' times, model batches, windows, the score cache, degraded
    decisions and the language gate."""

    def __init__(self, f: Families, redis: RedisMetrics, budget_s: float) -> None:
        """`budget_s` is also a bucket bound of `end_to_end_seconds`: the share of decisions
        within budget is then exact, whatever the budget."""
        super().__init__(f)
        requests = f.counter("cache_requests", "Score cache lookups", "level", "result")
        self.l1_hit, self.l1_miss = requests.labels("l1", "hit"), requests.labels("l1", "miss")
        self.redis_hit = requests.labels("redis", "hit")
        self.redis_miss = requests.labels("redis", "miss")
        self.inflight_hit = requests.labels("inflight", "hit")
        self.cache_writes_dropped = f.counter(
            "cache_writes_dropped", "Scores not written to Redis (down or backlog)"
        )
        self.redis_errors, self.redis_up = redis.errors, redis.up
        self.cache_reads = redis.round_trips.labels("cache_read")
        self.cache_writes = redis.round_trips.labels("cache_write")
        stages = f.histogram(
            "stage_seconds",
            "Time per message in each stage: queue (waiting for a model batch) and score (the "
            "model call) count the messages the model scored; total (fetched to decided) counts "
            "every decision, cached and degraded included; dead letters count in none",
            LATENCY_BUCKETS_S,
            "stage",
        )
        self.stage_queue, self.stage_score = stages.labels("queue"), stages.labels("score")
        self.stage_total = stages.labels("total")
        self.end_to_end = f.histogram(
            "end_to_end_seconds",
            "Decisions by decided_at_ms - sent_at_ms: the latency each is judged by against the "
            "budget (clock skew below 0 counts as 0)",
            sorted({*END_TO_END_BUCKETS_S, budget_s}),
        )
        self.batch_size = f.histogram("batch_size", "Messages per model batch", BATCH_BUCKETS)
        self.over_budget = f.counter("over_budget", "Decisions later than the latency budget")
        self.message_windows = f.histogram(
            "message_windows",
            "Windows of the model's length per message past the screen, scored or found in "
            "the cache (above 1: a long message read whole)",
            WINDOW_BUCKETS,
        )
        self.truncated = f.counter(
            "truncated_messages",
            "Messages longer than MODERATOR_MAX_WINDOWS windows: their middle was not all read "
            "(nothing flagged: review, reason truncated)",
        )
        self.unsupported_language = ByLabel(  # by language code: the gate's candidates
            f.counter(
                "unsupported_language",
                "Messages the language gate named as a language the model does not read",
                "language",
            )
        )
        self.degraded = ByLabel(
            f.counter("degraded_decisions", "Late messages decided without the model", "action"),
            *DEFAULT_ACTIONS,
        )


class UserMetrics(Wing):
    """The users' rules (moderator/users/escalation.py) and where their state was kept."""

    def __init__(self, f: Families, redis: RedisMetrics) -> None:
        super().__init__(f)
        self.rules = ByLabel(  # by the reason's head, one of USER_RULES
            f.counter(
                "user_rules",
                "Decisions the users' rules made or changed: muted, rate_limited, spam, link "
                "(decided without the model), escalated (one step up the ladder)",
                "rule",
            ),
            *USER_RULES,
        )
        self.escalated = self.rules["escalated"]
        self.degraded = f.gauge(
            "user_state_degraded", "1 while users' state is kept per process (Redis failed)"
        )
        self.round_trips = ByLabel(
            f.counter(
                "user_state_round_trips",
                "Redis calls for users' state, by step (one per batch)",
                "step",
            ),
            *USER_STEPS,
        )
        self.local = ByLabel(
            f.counter(
                "user_state_local",
                "Messages whose users' state step ran on per-process state (Redis down or slow)",
                "step",
            ),
            *USER_STEPS,
        )
        self.redis_errors = redis.errors


class PolicyMetrics(Wing):
    """Channel policies read from their topic (moderator/policy/channels.py)."""

    def __init__(self, f: Families) -> None:
        super().__init__(f)
        self.updates = ByLabel(
            f.counter(
                "policy_updates",
                "Policy records read from the policies topic: applied, removed (tombstone) or "
                "rejected (invalid; the previous policy stays)",
                "result",
            ),
            *POLICY_RESULTS,
        )
        self.rejected = self.updates["rejected"]
        self.policies = f.gauge("channel_policies", "Channels with a policy of their own")


class ReviewMetrics(Wing):
    """Held messages, their verdicts and timeouts, and the overrides verdicts make."""

    def __init__(self, f: Families, redis: RedisMetrics, verdicts: Sequence[str]) -> None:
        """`verdicts`: those a human may give (moderator/records.py VERDICTS)."""
        super().__init__(f)
        self._verdicts = tuple(verdicts)
        self.review_fallbacks = f.counter(
            "review_fallbacks",
            "Messages held in this process, their review record without context, because Redis "
            "was down, slow or disabled",
        )
        self.held_messages = f.gauge(
            "held_messages", "Messages awaiting a verdict or their timeout (this instance's view)"
        )
        self.held_timeout_spent = f.gauge(
            "held_timeout_spent_ratio",
            "The held message next due: the share of its review timeout spent (0: none held)",
        )
        self.review_timeouts = f.counter(
            "review_timeouts", "Held messages timed out to their policy's review_fallback"
        )
        self.verdicts = ByLabel(  # by (model_action, verdict, label): see precreate_verdicts
            f.counter(
                "verdicts",
                "Verdicts applied to held messages (the first per message), by the action the "
                "model's decision had, the human's verdict, and the label or reason that held it",
                *("model_action", "verdict", "label"),
            )
        )
        self.verdict_outcomes = ByLabel(
            f.counter(
                "verdict_outcomes",
                "Verdicts read: applied, late (a second one for a message), not_held (unknown or "
                "expired), timed_out (after its fallback) or invalid: the last three dead-lettered",
                "outcome",
            ),
            *VERDICT_OUTCOMES,
        )
        self.override_decisions = ByLabel(
            f.counter(
                "override_decisions",
                "Messages decided by a moderator's override (their normalised text had a "
                "verdict), without the model",
                "action",
            ),
            *OVERRIDE_ACTIONS,
        )
        self.override_updates = ByLabel(
            f.counter(
                "override_updates",
                "Override records read from the overrides topic or written here: applied, "
                "removed (tombstone) or rejected (invalid; an earlier override for the text "
                "stays)",
                "result",
            ),
            *POLICY_RESULTS,
        )
        self.overrides = f.gauge("overrides", "Overrides in effect (global and per channel)")
        self.review_trips = redis.round_trips.labels("review")
        self.verdict_trips = redis.round_trips.labels("verdict")
        self.sweep_trips = redis.round_trips.labels("sweep")

    def precreate_verdicts(self, labels: Iterable[str]) -> None:
        """Every agreement series at 0: a held message's label is one of the model's `labels`
        or a reason that holds without one."""
        for label in (*labels, *HOLD_REASONS):
            for verdict in self._verdicts:
                self.verdicts["review", verdict, label]
