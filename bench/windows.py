"""`python -m bench.windows [--probe]`: what reading long messages whole and gating languages cost.

Prints, for BENCHMARKS.md:
- the model time of one message read in k windows of the model's length (one call, k rows), at
  1 and 2 intra-op threads: wall time (min and median of the repeats: the machine is shared, the
  minimum is the least disturbed) and the process's CPU time, and the cost per extra window;
- a 64 KiB message: preparing its windows (normalising, tokenizing, planning) and scoring them;
- the language gate (`moderator/decide/language.py`) per message: p50 / p99 on chat lines, at 1,500
  characters and at 64 KiB, and the time to build it.

`--probe` also measures what the windows are for, with model scores and the default policy
(deny terms aside): the load generator's hostile lines that the policy flags alone, put inside
>= 1,500 characters of held-out real chat at the start, middle or end, and long benign messages
of the same chat; flagged (any action but allow) by the first window only (today) and by the
windows.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import numpy as np

from loadgen.machine import machine_label
from models.evaluation.long_text import joined
from moderator.config import REPO_ROOT, Settings
from moderator.decide.classifier import Classifier
from moderator.decide.language import LanguageGate
from moderator.decide.windows import WindowScorer
from moderator.policy.long_text import discounted, windows_raise
from moderator.policy.rules import ALLOW, Policy

CORPUS = REPO_ROOT / "loadgen" / "corpus"
WINDOW_COUNTS = (1, 2, 4, 8, 16)
LIMIT_BYTES = 64 * 1024
LONG_CHARS = 1_500
SEED = 20261125


def corpus_lines(name: str) -> list[str]:
    """One of the load generator's corpus files, comments and blank lines skipped."""
    path: Path = CORPUS / f"{name}.txt"
    rows = path.read_text(encoding="utf-8").splitlines()
    return [r.strip() for r in rows if r.strip() and not r.startswith("# ")]


def timed(call: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(min wall, median wall, median process CPU) of `repeats` calls, in milliseconds."""
    call()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return min(walls) * 1e3, statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3


def window_cost(model_dir: Path, repeats: int) -> None:
    print("\n## Model time per message read in k windows (one call, k full rows)\n")
    print("| threads | windows | wall min ms | wall median ms | CPU ms | CPU ms per window |")
    print("|---|---|---|---|---|---|")
    for threads in (1, 2):
        classifier = Classifier(model_dir, threads=threads)
        word = classifier.tokenizer.token_to_id("the") or classifier.pad_id + 1
        row = np.full(classifier.info.max_length, word, dtype=np.int64)
        fits: list[tuple[int, float]] = []
        for k in WINDOW_COUNTS:
            low, mid, cpu = timed(partial(classifier.score_ids, [row] * k), repeats)
            fits.append((k, low))
            print(f"| {threads} | {k} | {low:.1f} | {mid:.1f} | {cpu:.1f} | {cpu / k:.1f} |")
        slope = np.polyfit([k for k, _ in fits], [low for _, low in fits], 1)[0]
        print(f"| {threads} | each extra window (slope of wall min) | {slope:.1f} | | | |")


def limit_cost(model_dir: Path, repeats: int) -> None:
    rng = random.Random(SEED)
    text = joined(corpus_lines("benign") + corpus_lines("long"), LIMIT_BYTES, rng)
    text = text.encode()[:LIMIT_BYTES].decode(errors="ignore")
    print(f"\n## A {len(text.encode()):,}-byte message (the input limit)\n")
    print("| threads | windows | truncated | prepare ms (min) | model wall min ms | median ms "
          "| CPU ms |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for threads in (1, 2):
        scorer = WindowScorer(Classifier(model_dir, threads=threads))
        windows = scorer.windows(text)
        prepare, _, _ = timed(partial(scorer.windows, text), repeats)
        low, mid, cpu = timed(partial(scorer.score_windows, windows), repeats)
        print(f"| {threads} | {len(windows.ids)} | {windows.truncated} | {prepare:.1f} "
              f"| {low:.1f} | {mid:.1f} | {cpu:.1f} |")  # fmt: skip


def gate_cost(repeats: int) -> None:
    started = time.perf_counter()
    gate = LanguageGate()
    built = time.perf_counter() - started
    rng = random.Random(SEED)
    lines = corpus_lines("benign") + corpus_lines("toxic") + corpus_lines("long")
    cases = {
        "chat lines (the load generator's corpus)": lines,
        f"{LONG_CHARS:,} characters": [joined(lines, LONG_CHARS, rng)[:LONG_CHARS]
                                       for _ in range(50)],
        "64 KiB": [joined(lines, LIMIT_BYTES, rng)[:LIMIT_BYTES] for _ in range(3)],
    }  # fmt: skip
    print(f"\n## Language gate per message (built in {built * 1e3:.0f} ms)\n")
    print("| text | messages | mean characters | p50 µs | p99 µs |")
    print("|---|---|---|---|---|")
    for label, texts in cases.items():
        times = []
        for _ in range(max(1, repeats // 5)):
            for text in texts:
                start = time.perf_counter_ns()
                gate.detect(text)
                times.append((time.perf_counter_ns() - start) / 1e3)
        times.sort()
        p50, p99 = times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]
        mean = sum(map(len, texts)) / len(texts)
        print(f"| {label} | {len(texts)} | {mean:,.0f} | {p50:,.0f} | {p99:,.0f} |")


def probe(model_dir: Path, n_long: int) -> None:
    """Hostile lines inside long benign chat, and long benign chat: first window vs windows."""
    from models.lines import realdata
    from models.sources import archives  # the real chat pool (pinned PyPI archive, cached)

    classifier = Classifier(model_dir, threads=Settings().effective_threads)
    scorer = WindowScorer(classifier)
    policy = Policy.load()
    rng = random.Random(SEED)

    def flagged(scores: np.ndarray, windows: int = 1) -> bool:
        named = classifier.as_dict(scores)  # the policy's windows_raise, as the service judges
        return policy.decide(discounted(named, windows_raise(policy.spec), windows)).action != ALLOW

    def alone(texts: Sequence[str]) -> list[bool]:
        return [flagged(s) for i in range(0, len(texts), 64)
                for s in classifier.score_ids(classifier.encode(texts[i : i + 64]))]  # fmt: skip

    chat = [str(t) for t in archives.load("chat") if realdata.split_of(str(t)) == "test"]
    chat = rng.sample(chat, min(len(chat), 5_000))
    benign = [t for t, hot in zip(chat, alone(chat), strict=True) if not hot]
    toxic = corpus_lines("toxic")
    hostile = [t for t, hot in zip(toxic, alone(toxic), strict=True) if hot]
    print(
        f"\n## Probe: the load generator's {len(hostile)} hostile lines that the default policy "
        f"flags alone, inside >= {LONG_CHARS:,} characters of held-out real chat (test split "
        f"of `chat`, lines the policy does not flag alone: {len(benign):,} of {len(chat):,})\n"
    )
    print("| where | texts | flagged, first window only | flagged, windows | windows per text |")
    print("|---|---|---|---|---|")
    for where in ("start", "middle", "end"):
        first = windowed = rows = 0
        for line in hostile:
            pad = joined(benign, LONG_CHARS, rng)
            cut = {"start": 0, "middle": pad.find(" ", len(pad) // 2), "end": len(pad)}[where]
            text = f"{pad[:cut]} {line} {pad[cut:]}".strip()
            first += flagged(classifier.score_ids(classifier.encode([text]))[0])
            windows = scorer.windows(text)
            windowed += flagged(scorer.score_windows(windows).scores, len(windows.ids))
            rows += len(windows.ids)
        n = len(hostile)
        print(f"| {where} | {n} | {first / n:.1%} | {windowed / n:.1%} | {rows / n:.1f} |")
    first = windowed = 0
    for _ in range(n_long):
        text = joined(benign, LONG_CHARS, rng)
        first += flagged(classifier.score_ids(classifier.encode([text]))[0])
        windows = scorer.windows(text)
        windowed += flagged(scorer.score_windows(windows).scores, len(windows.ids))
    print(
        f"\nLong benign messages ({n_long} of >= {LONG_CHARS:,} characters, the same lines "
        f"joined): flagged {first / n_long:.1%} by the first window, "
        f"{windowed / n_long:.1%} by the windows."
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.windows", description=__doc__)
    parser.add_argument("--repeats", type=int, default=15, help="timed calls per figure")
    parser.add_argument("--probe", action="store_true", help="also run the padding probe")
    parser.add_argument("--long", type=int, default=300, help="long benign messages probed")
    args = parser.parse_args(argv)
    model_dir = Settings.from_env().model_dir
    info = Classifier(model_dir, threads=1).info
    print(f"# Windows and language gate: {info.ident}, max_length {info.max_length}, "
          f"{machine_label()}")  # fmt: skip
    window_cost(model_dir, args.repeats)
    limit_cost(model_dir, args.repeats)
    gate_cost(args.repeats)
    if args.probe:
        probe(model_dir, args.long)


if __name__ == "__main__":
    main()
