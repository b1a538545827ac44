"""The goodput search of bench/goodput.py: the highest passing rate, confirmed."""

from __future__ import annotations

from collections.abc import Callable

from bench.goodput import GoodputPlan, Probe, host_bound, search

PLAN = GoodputPlan(start=60.0, duration_s=1.0, factor=1.5, resolution=0.08, max_probes=12)


def _probe(passes: Callable[[float, int], bool]) -> Callable[[float], Probe]:
    seen: list[float] = []

    def probe(rate: float) -> Probe:
        seen.append(rate)
        return Probe(rate, passes(rate, seen.count(rate)), {})

    return probe


def test_search_finds_the_edge_and_confirms_it() -> None:
    best, confirmed, probes = search(_probe(lambda r, _: r <= 123), PLAN)
    assert confirmed
    assert best is not None
    assert best <= 123
    assert 123 / best < 1 + PLAN.resolution
    assert probes[-1].rate == best
    assert probes[-1].ok
    assert [p.rate for p in probes].count(best) == 2
    assert any(not p.ok and p.rate / best <= 1 + PLAN.resolution for p in probes)


def test_a_failed_confirmation_moves_the_search_below() -> None:
    # Up to 130 a rate above 100 passes the first time only: a lucky run must not count.
    plan = GoodputPlan(60.0, 1.0, max_probes=20)
    best, confirmed, probes = search(_probe(lambda r, n: r <= 100 or (r <= 130 and n == 1)), plan)
    assert confirmed
    assert best is not None
    assert best <= 100
    assert probes[-1].ok
    assert probes[-1].rate == best


def test_nothing_passes() -> None:
    best, confirmed, probes = search(
        _probe(lambda r, _: False), GoodputPlan(60.0, 1.0, max_probes=4)
    )
    assert not confirmed
    assert best is None
    assert len(probes) == 4
    assert [p.rate for p in probes] == sorted((p.rate for p in probes), reverse=True)


def test_out_of_probes_reports_the_best_so_far_unconfirmed() -> None:
    # The edge is noisy: every run above 100 passes once, then fails.
    plan = GoodputPlan(60.0, 1.0, max_probes=5)
    best, confirmed, probes = search(_probe(lambda r, n: r <= 100 or (r <= 200 and n == 1)), plan)
    assert not confirmed
    # 60, 90, 135 pass; 202.5 fails; 165.3 (their geometric middle) passes once: out of probes.
    assert [p.rate for p in probes] == [60.0, 90.0, 135.0, 202.5, 165.3]
    assert best == 165.3


def test_host_bound() -> None:
    cpu = {"broker": 3.0, "load generator": 1.0, "event loop": 99.0}
    assert host_bound(2, 4.0, cpu) == 250.0  # 2000 CPU-ms/s over 8 ms a message
