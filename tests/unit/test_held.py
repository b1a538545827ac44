"""The held queue's age gauge (moderator/review/held.py) without Redis: what
ModeratorHeldNearTimeout reads. The same figure from Redis's due index:
tests/integration/test_held.py."""

from __future__ import annotations

from typing import Any

import pytest

from moderator.metrics import Metrics
from moderator.review.held import HeldStore, timeout_spent


@pytest.mark.parametrize(("now_ms", "due_ms", "held_ms", "spent"), [
    (1_000, 0, 0, 0.0),  # none held
    (1_000, 11_000, 1_000, 0.0),  # just held
    (9_000, 11_000, 1_000, 0.8),
    (16_000, 11_000, 1_000, 1.5),  # overdue: no sweep ended it
    (500, 11_000, 1_000, 0.0),  # a clock behind the one that held it
    (1_000, 1_000, 1_000, 0.0),  # no timeout to spend
])  # fmt: skip
def test_the_share_of_its_timeout_a_held_message_spent(
    now_ms: int, due_ms: int, held_ms: int, spent: float
) -> None:
    assert timeout_spent(now_ms, due_ms, held_ms) == pytest.approx(spent)


class NoRedis:
    redis_enabled = True
    client = None

    def failed(self, exc: BaseException) -> None:
        raise AssertionError("no call is made without a client")


def held(i: int, held_at_ms: int, expires_at_ms: int) -> dict[str, Any]:
    return {"message_id": f"m-{i}", "held_at_ms": held_at_ms, "expires_at_ms": expires_at_ms}


async def test_held_here_the_gauge_follows_the_next_message_due() -> None:
    metrics = Metrics()
    store = HeldStore(NoRedis(), metrics.review, group="g", timeout_s=0.1)

    def gauge() -> float | None:
        return metrics.registry.get_sample_value("moderator_held_timeout_spent_ratio")

    assert gauge() == 0, "a fresh process exports it at 0"
    # m-2 is due first though held later (a channel with a shorter timeout).
    await store.hold([held(1, 0, 10_000), held(2, 4_000, 6_000)], {}, [], ring_size=1,
                     ring_ttl_s=1)  # fmt: skip
    assert await store.claim_due(5_000) == []
    assert gauge() == pytest.approx(0.5)  # m-2: 1 s of its 2
    await store.apply("m-2", "v/0/1")  # decided: m-1 is next
    assert await store.claim_due(9_000) == []
    assert gauge() == pytest.approx(0.9)
    assert [h["message_id"] for h in await store.claim_due(10_000)] == ["m-1"]
    assert gauge() == 0, "none left waiting"
