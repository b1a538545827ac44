"""The claims and first-verdict locks' in-process fallback (console/claims.py): Redis absent."""

from __future__ import annotations

from console.claims import Claims


async def test_a_console_without_redis_forgets_its_oldest_locks_past_its_bound() -> None:
    claims = Claims("", 60, verdict_topic="v", kept=3)
    first = {"moderator_id": "alice", "at_ms": 1}
    for n in range(4):
        assert await claims.first_verdict(f"m{n}", first) == first
    later = {"moderator_id": "bob", "at_ms": 2}
    assert await claims.first_verdict("m3", later) == first  # still locked: among the newest
    assert await claims.first_verdict("m0", later) == later  # forgotten: the oldest of four


async def test_a_console_without_redis_forgets_its_oldest_claims_past_its_bound() -> None:
    claims = Claims("", 60, verdict_topic="v", kept=3)
    for n in range(4):
        await claims.claim(f"m{n}", "alice")
    assert (await claims.claim("m3", "bob"))["moderator_id"] == "alice"
    assert (await claims.claim("m0", "bob"))["moderator_id"] == "bob"
    assert set(await claims.held(["m0", "m1", "m2", "m3"]) or {}) == {"m0", "m2", "m3"}
