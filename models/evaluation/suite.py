"""Our functional suite (`data/suite.tsv`) and the padding probes, judged as the runtime judges.

Our model is judged by what `moderator score` decides for a line (`screen.decide_texts`:
allow phrases, deny terms, the classifier, the default policy), so whatever the runtime adds on
that path (long-message windows, language routing) is measured here without a second copy of
it. A teacher, which has no policy, by its own rule as in the real-text section
(`models.lines.teachers.flagged`): its only verdict besides `allow` is `flag`. Flagged and
caught mean any action but `allow` (issue 27).

- The suite, per category: caught % of the hateful ones, flagged % of the benign contrasts; per
  language, hostile lines not allowed and benign lines nudged or blocked (`review` is the right
  answer for a language the model does not read); the short lines sent to `review`.
- Padding (a): each English hostile suite line our model flags alone, set at the start, in the
  middle and at the end of at least `MIN_CHARS` characters of ordinary chat; % still flagged.
- Padding (b): long benign messages, held-out real chat lines joined to at least `MIN_CHARS`
  characters; % flagged.

Ordinary chat is the chat-like test split of `models.lines.realdata` (never trained on, never tuned
on) minus every line any teacher flags: the padding should be text nobody would call hostile.
Everything is seeded. `python -m models.evaluation.suite [--model DIR]` prints the section for a
model.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from models.files import DATA_DIR

if TYPE_CHECKING:
    from moderator.decide.classifier import Classifier
    from moderator.policy.rules import Policy

logger = logging.getLogger(__name__)

SUITE_FILE = DATA_DIR / "suite.tsv"
HATEFUL, BENIGN = "hateful", "benign"
LANG_PREFIX = "lang_"  # lang_es, lang_de, ...: the languages probe
SHORT = "short"  # short or ambiguous lines that must never go to review
ALLOW, REVIEW, FLAG = "allow", "review", "flag"  # FLAG: a teacher's verdict
MIN_CHARS = 1500  # padding around a hostile line, and the length of a long benign message
POSITIONS = ("start", "middle", "end")
LONG_MESSAGES = 400  # long benign messages built (fewer when the pool runs out)
SEED = 20261125
SCORE_BATCH = 32  # lines per call of the runtime path, as `moderator score` batches them


@dataclass(frozen=True)
class Case:
    """One line of the suite."""

    category: str
    hateful: bool  # must not be allowed (else: must be allowed)
    text: str

    @property
    def language(self) -> str | None:
        """The language code of a languages-probe line, else None."""
        return self.category.removeprefix(LANG_PREFIX) if self.is_language else None

    @property
    def is_language(self) -> bool:
        return self.category.startswith(LANG_PREFIX)


def read_suite(path: Path = SUITE_FILE) -> list[Case]:
    """Every case of the suite file, in file order (a header row, then category/expected/text)."""
    rows = path.read_text(encoding="utf-8").splitlines()
    if not rows or rows[0].split("\t") != ["category", "expected", "text"]:
        raise ValueError(f"{path}: the first row must be the header category/expected/text")
    cases = []
    for number, row in enumerate(rows[1:], start=2):
        parts = row.split("\t")
        if len(parts) != 3 or parts[1] not in (HATEFUL, BENIGN) or not parts[2].strip():
            raise ValueError(f"{path}:{number}: want category, hateful|benign, text")
        cases.append(Case(parts[0], parts[1] == HATEFUL, parts[2]))
    return cases


class Decision(NamedTuple):
    action: str
    reason: str | None


Judge = Callable[[Sequence[str]], list[Decision]]


@dataclass(frozen=True)
class Scorer:
    """A named judge; `reviews` says whether `review` is among its verdicts (teachers: no)."""

    name: str
    judge: Judge
    reviews: bool = True


def runtime_judge(classifier: Classifier, policy: Policy, batch: int = SCORE_BATCH) -> Judge:
    """What `moderator score` decides for each text (`screen.decide_texts`, the path it and the
    pipeline share), `batch` lines at a time as it reads them."""
    from moderator.decide.language import LanguageGate
    from moderator.decide.screen import Reader, decide_texts

    reader = Reader(classifier, gate=LanguageGate())  # windows and the language gate, as it runs

    def judge(texts: Sequence[str]) -> list[Decision]:
        out: list[Decision] = []
        for start in range(0, len(texts), batch):
            for judged in decide_texts(reader, policy, texts[start : start + batch]):
                out.append(Decision(judged.ruling.action, judged.ruling.reason))
        return out

    return judge


def teacher_judge(teacher: Any) -> Judge:
    """A teacher's verdict by its own rule, as the real-text section counts it."""
    from models.lines import teachers

    def judge(texts: Sequence[str]) -> list[Decision]:
        if not texts:
            return []
        flagged = teachers.flagged(teacher, teacher.score(list(texts)))
        return [Decision(FLAG if f else ALLOW, None) for f in flagged]

    return judge


def _rate(flags: Sequence[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def judge_suite(cases: Sequence[Case], scorers: Sequence[Scorer]) -> dict[str, Any]:
    """Per category, per language and for the short lines, every scorer's figures.

    A category's `rate` is caught % for hateful cases and flagged % for benign ones, so "higher
    is better" holds for the first and "lower is better" for the second, as the report says.
    """
    decided = {s.name: s.judge([c.text for c in cases]) for s in scorers}

    def share(picked: Sequence[int], name: str, hit: Callable[[Decision], bool]) -> float | None:
        return _rate([hit(decided[name][i]) for i in picked])

    def flagged(d: Decision) -> bool:
        return d.action != ALLOW

    def nudged_or_blocked(d: Decision) -> bool:
        return d.action not in (ALLOW, REVIEW)

    def review(d: Decision) -> bool:
        return d.action == REVIEW

    english = [i for i, c in enumerate(cases) if not c.is_language and c.category != SHORT]
    categories: dict[str, dict[str, Any]] = {}
    for i in english:
        entry = categories.setdefault(
            cases[i].category,
            {"expected": HATEFUL if cases[i].hateful else BENIGN, "index": []},
        )
        if (entry["expected"] == HATEFUL) != cases[i].hateful:
            raise ValueError(f"category {cases[i].category} mixes hateful and benign cases")
        entry["index"].append(i)
    for entry in categories.values():
        picked = entry.pop("index")
        entry["lines"] = len(picked)
        entry["rate"] = {s.name: share(picked, s.name, flagged) for s in scorers}
    totals = {}
    for want in (True, False):
        picked = [i for i in english if cases[i].hateful == want]
        totals[HATEFUL if want else BENIGN] = {
            "lines": len(picked),
            "rate": {s.name: share(picked, s.name, flagged) for s in scorers},
        }
    languages: dict[str, dict[str, Any]] = {}
    codes = sorted({c.language for c in cases if c.language})
    for code in [*codes, "all"]:
        hostile = [
            i
            for i, c in enumerate(cases)
            if c.is_language and c.hateful and code in ("all", c.language)
        ]
        benign = [
            i
            for i, c in enumerate(cases)
            if c.is_language and not c.hateful and code in ("all", c.language)
        ]
        languages[code] = {
            "hostile": len(hostile),
            "benign": len(benign),
            "hostile_not_allowed": {s.name: share(hostile, s.name, flagged) for s in scorers},
            "benign_nudged_or_blocked": {
                s.name: share(benign, s.name, nudged_or_blocked) for s in scorers
            },
        }
    short = [i for i, c in enumerate(cases) if c.category == SHORT]
    return {
        "file": f"models/data/{SUITE_FILE.name}",
        "scorers": [s.name for s in scorers],
        "categories": categories,
        "totals": totals,
        "languages": languages,
        "short": {
            "lines": len(short),
            "review": {
                s.name: share(short, s.name, review) if s.reviews else None for s in scorers
            },
            "flagged": {s.name: share(short, s.name, flagged) for s in scorers},
        },
    }


# -- padding -----------------------------------------------------------------------------------


def _padding(pool: Sequence[str], rng: random.Random, min_chars: int) -> list[str]:
    """Distinct pool lines, drawn in a seeded order, until joined they reach `min_chars`."""
    picked: list[str] = []
    size = -1
    for i in rng.sample(range(len(pool)), len(pool)):
        picked.append(pool[i])
        size += len(pool[i]) + 1
        if size >= min_chars:
            return picked
    raise ValueError(f"the benign pool holds fewer than {min_chars} characters")


def padded(
    hostile: Sequence[str], pool: Sequence[str], *, seed: int = SEED, min_chars: int = MIN_CHARS
) -> list[dict[str, str]]:
    """Each hostile line inside its own padding of at least `min_chars` characters of pool
    lines: at the start, in the middle (at the line boundary nearest half the padding) and at
    the end. The three positions of a line share one padding, so they differ only in place."""
    rng = random.Random(seed)
    out = []
    for line in hostile:
        pad = _padding(pool, rng, min_chars)
        lengths = [len(p) + 1 for p in pad]
        half, run, cut = sum(lengths) / 2, 0, 0
        while cut < len(pad) and abs(run + lengths[cut] - half) <= abs(run - half):
            run += lengths[cut]
            cut += 1
        placed = {
            "start": [line, *pad],
            "middle": [*pad[:cut], line, *pad[cut:]],
            "end": [*pad, line],
        }
        for position in POSITIONS:
            out.append({"position": position, "hostile": line, "text": " ".join(placed[position])})
        out.append({"position": "alone", "hostile": line, "text": " ".join(pad)})
    return out


def long_messages(
    pool: Sequence[str], *, seed: int = SEED, min_chars: int = MIN_CHARS, n: int = LONG_MESSAGES
) -> list[str]:
    """Up to `n` messages of at least `min_chars` characters, each pool line in one at most."""
    order = random.Random(seed).sample(list(pool), len(pool))
    out: list[str] = []
    current: list[str] = []
    for line in order:
        current.append(line)
        if len(" ".join(current)) >= min_chars:
            out.append(" ".join(current))
            current = []
            if len(out) == n:
                break
    return out


def padding_probes(
    judge: Judge,
    hostile: Sequence[str],
    pool: Sequence[str],
    *,
    seed: int = SEED,
    min_chars: int = MIN_CHARS,
    n_long: int = LONG_MESSAGES,
) -> dict[str, Any]:
    """(a) hostile lines the judge flags alone, padded: % still flagged per position, and how
    often the padding alone is flagged (the floor); (b) long benign messages: % flagged."""
    alone = judge(hostile)
    kept = [h for h, d in zip(hostile, alone, strict=True) if d.action != ALLOW]
    placed = padded(kept, pool, seed=seed, min_chars=min_chars)
    decided = judge([p["text"] for p in placed])
    by_position: dict[str, list[bool]] = {}
    for p, d in zip(placed, decided, strict=True):
        by_position.setdefault(p["position"], []).append(d.action != ALLOW)
    inside = [f for pos in POSITIONS for f in by_position.get(pos, [])]
    # The same figure over the paddings the judge allows alone: what the hostile line does.
    quiet = [not f for f in by_position.get("alone", [])]
    clean = [
        f for pos in POSITIONS for f, q in zip(by_position.get(pos, []), quiet, strict=True) if q
    ]
    long = long_messages(pool, seed=seed + 1, min_chars=min_chars, n=n_long)
    long_decided = judge(long)

    def share(action: str) -> float | None:
        return _rate([d.action == action for d in long_decided])

    return {
        "seed": seed,
        "min_chars": min_chars,
        "pool_lines": len(pool),
        "hostile": {
            "lines": len(hostile),
            "flagged_alone": len(kept),
            "still_flagged": {pos: _rate(by_position.get(pos, [])) for pos in POSITIONS},
            "still_flagged_all": _rate(inside),
            "padding_alone_flagged": _rate(by_position.get("alone", [])),
            "still_flagged_padding_allowed": _rate(clean),
        },
        "long_benign": {
            "messages": len(long),
            "mean_chars": round(sum(map(len, long)) / len(long)) if long else 0,
            "flagged": _rate([d.action != ALLOW for d in long_decided]),
            "review": share(REVIEW),
            "blocked": share("block"),
        },
    }


def benign_pool(teachers_loaded: Sequence[Any]) -> list[str]:
    """Chat-like test-split lines (real, held out) that no teacher flags, in source order."""
    from models.lines import realdata

    lines = realdata.select(realdata.load(), "test", realdata.CHAT_LIKE)
    texts = [ln.text for ln in lines if not ln.toxic]
    keep = [True] * len(texts)
    for teacher in teachers_loaded:
        for i, d in enumerate(teacher_judge(teacher)(texts)):
            keep[i] = keep[i] and d.action == ALLOW
    return [t for t, k in zip(texts, keep, strict=True) if k]


def in_training(cases: Sequence[Case], trained: Iterable[str]) -> dict[str, int]:
    """Per category, the suite lines that also occur (normalised) among the `trained` texts.
    Common lines ("gg", "kys") may be there by coincidence; the report says how many."""
    from moderator.normalize import normalize_text

    def key(text: str) -> str:
        return " ".join(normalize_text(text).casefold().split())

    seen = {key(t) for t in trained}
    out: dict[str, int] = {}
    for case in cases:
        if key(case.text) in seen:
            out[case.category] = out.get(case.category, 0) + 1
    return out


def trained_texts() -> list[str]:
    """Text the model trains on: the template corpus and the real train split."""
    from models.lines import corpus, realdata

    templates = [t for t, _ in corpus.read_tsv(corpus.TRAIN_FILE)]
    return templates + [ln.text for ln in realdata.load() if ln.split == "train"]


def measure(model_dir: Path, *, threads: int = 2) -> dict[str, Any]:
    """The suite (our model as the runtime decides, and every teacher) and the padding probes."""
    from models.lines import teachers
    from moderator.decide.classifier import Classifier
    from moderator.policy.rules import Policy

    classifier = Classifier(model_dir, threads=threads)
    policy = Policy.load()
    ours = Scorer("int8", runtime_judge(classifier, policy))
    loaded = teachers.load_all()
    scorers = [ours, *(Scorer(t.name, teacher_judge(t), reviews=False) for t in loaded)]
    cases = read_suite()
    logger.info("scoring the %d suite lines with %d scorers", len(cases), len(scorers))
    suite = judge_suite(cases, scorers)
    suite["model"] = classifier.info.ident
    suite["policy"] = policy.ident
    suite["in_training"] = in_training(cases, trained_texts())
    hostile = [c.text for c in cases if c.hateful and not c.is_language]
    pool = benign_pool(loaded)
    logger.info("padding probes: %d hostile lines, %d pool lines", len(hostile), len(pool))
    suite["padding"] = padding_probes(ours.judge, hostile, pool)
    return suite


# -- rendering ---------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render(suite: Mapping[str, Any] | None) -> list[str]:
    """The report's section (Markdown lines); nothing when the suite was not measured."""
    if not suite:
        return []
    names = list(suite["scorers"])
    head = ["| " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    lines = [
        "## Our functional suite (`models/data/suite.tsv`, hand-written, never trained on)",
        "",
        f"Each line decided as `moderator score` decides it ({suite.get('model', 'int8')},"
        f" {suite.get('policy', 'default policy')}); a teacher by its own rule. Hateful"
        " categories: caught (any action but `allow`), higher is better; benign contrasts:"
        ' flagged, lower is better. Game talk about the game ("I\'ll kill you next round") is'
        " benign; threats that leave the game and insults aimed at the person are not"
        " (`models/README.md`).",
        "",
        "| category (lines) | want " + head[0],
        head[1],
    ]
    for name, c in suite["categories"].items():
        want = "caught" if c["expected"] == HATEFUL else "flagged"
        cells = " | ".join(_pct(c["rate"][n]) for n in names)
        lines.append(f"| {name} ({c['lines']}) | {want} | {cells} |")
    for key, want in ((HATEFUL, "caught"), (BENIGN, "flagged")):
        t = suite["totals"][key]
        cells = " | ".join(f"**{_pct(t['rate'][n])}**" for n in names)
        lines.append(f"| **all {key}** ({t['lines']}) | {want} | {cells} |")
    lines += [
        "",
        "Languages the model does not read: hostile lines not allowed (want high; `review` is the"
        " right answer), benign lines nudged or blocked (want none; `review` does not count).",
        "",
        "| language (hostile / benign) | figure " + head[0],
        head[1],
    ]
    for code, g in suite["languages"].items():
        for key, title in (
            ("hostile_not_allowed", "hostile not allowed"),
            ("benign_nudged_or_blocked", "benign nudged or blocked"),
        ):
            cells = " | ".join(_pct(g[key][n]) for n in names)
            lines.append(f"| {code} ({g['hostile']} / {g['benign']}) | {title} | {cells} |")
    short = suite["short"]
    trained = suite.get("in_training")
    if trained is not None:
        where = ", ".join(f"{k} {n}" for k, n in trained.items()) or "none"
        lines += [
            "",
            f"Suite lines that also occur in text the model trains on (template corpus or real"
            f" train split, normalised; by coincidence, as common chat): {where}.",
        ]
    lines += [
        "",
        f'Short or ambiguous lines ("gg", "xD", emoji, names; {short["lines"]}): sent to'
        " review "
        + ", ".join(f"{n} {_pct(short['review'][n])}" for n in names)
        + "; flagged "
        + ", ".join(f"{n} {_pct(short['flagged'][n])}" for n in names)
        + ".",
        "",
    ]
    pad = suite.get("padding")
    if pad:
        h, lb = pad["hostile"], pad["long_benign"]
        still = ", ".join(f"{pos} {_pct(h['still_flagged'][pos])}" for pos in POSITIONS)
        lines += [
            "### Padding (int8, the runtime's decision)",
            "",
            f"Ordinary chat: {pad['pool_lines']} chat-like test-split lines no teacher flags"
            f" (seed {pad['seed']}).",
            "",
            f"- A hostile suite line the model flags alone ({h['flagged_alone']} of"
            f" {h['lines']} English hostile lines), inside at least {pad['min_chars']}"
            f" characters of ordinary chat: still flagged **{_pct(h['still_flagged_all'])}**"
            f" ({still}); the padding alone is flagged {_pct(h['padding_alone_flagged'])};"
            f" where it is allowed alone, still flagged"
            f" {_pct(h['still_flagged_padding_allowed'])}.",
            f"- Long benign messages ({lb['messages']} of at least {pad['min_chars']}"
            f" characters, mean {lb['mean_chars']}, each line in one only): flagged"
            f" **{_pct(lb['flagged'])}** (review {_pct(lb['review'])}, blocked"
            f" {_pct(lb['blocked'])}).",
            "",
        ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    from moderator.config import DEFAULT_MODEL_DIR

    parser = argparse.ArgumentParser(prog="python -m models.evaluation.suite", description=__doc__)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR, help="model directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.stdout.write("\n".join(render(measure(args.model))) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
