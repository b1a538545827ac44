"""`python -m bench.language [--split test]`: how often the language gate names real English chat
as another language, and how it does on chat in other languages.

- English: the real pools of models/lines/realdata.py (chat, SMS, tweets: the "benign chat-like"
  pool; film dialogue and questions beside them), one split (the gate's thresholds were chosen
  on `dev`; `test` is held out), each line as one message. Every line named is a message the
  default policy would send to `review`; the lines are printed, so a reader can see how many
  are English at all (the pools hold some Spanish, Turkish, French, Tamil lines).
- Other languages: `models/data/other_languages.tsv` (hand-written, hostile and benign lines in
  es, de, fr, pt, it, ru, nl; the thresholds were chosen with it) and
  `other_languages_heldout.tsv` (written after, in chat style), named as not English, and named
  as their own language.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from models.lines import realdata
from models.sources import archives
from moderator.config import REPO_ROOT
from moderator.decide.language import LanguageGate

# The gate's thresholds were chosen with the first; the second was written after, held out.
OTHER_LANGUAGES = (
    REPO_ROOT / "models" / "data" / "other_languages.tsv",
    REPO_ROOT / "models" / "data" / "other_languages_heldout.tsv",
)
POOLS = ("chat", "sms_ham", "tweets", "movie_dialog", "questions")
SHOWN = 8  # named lines printed per pool


def english(gate: LanguageGate, split: str) -> None:
    print(f"\n## Real English lines named another language ({split} split)\n")
    print("| pool | lines | named | share |")
    print("|---|---|---|---|")
    chat_like = [0, 0]
    examples: dict[str, list[tuple[str, str]]] = {}
    for pool in POOLS:
        rows = archives.load(pool)
        texts = [r[0] if isinstance(r, tuple) else str(r) for r in rows]
        lines = [t for t in texts if realdata.split_of(t) == split]
        named = [(t, code) for t in lines if (code := gate.detect(t)) is not None]
        examples[pool] = named[:SHOWN]
        print(f"| {pool} | {len(lines):,} | {len(named)} | {len(named) / len(lines):.3%} |")
        if pool in realdata.CHAT_LIKE:
            chat_like[0] += len(lines)
            chat_like[1] += len(named)
    total, named_total = chat_like
    print(f"| chat-like ({', '.join(realdata.CHAT_LIKE)}) | {total:,} | {named_total} "
          f"| {named_total / total:.3%} |")  # fmt: skip
    print("\nThe lines named (at most", SHOWN, "per pool):\n")
    for pool, named in examples.items():
        for text, code in named:
            print(f"- {pool}: `{code}` {text[:100]!r}")


def other_languages(gate: LanguageGate, path: Path) -> None:
    rows = path.read_text(encoding="utf-8").splitlines()
    lines = [r.split("\t") for r in rows if r.strip() and not r.startswith("#")]
    flagged: Counter[tuple[str, str]] = Counter()
    right: Counter[tuple[str, str]] = Counter()
    totals: Counter[tuple[str, str]] = Counter()
    missed: list[str] = []
    for text, lang, kind in lines:
        code = gate.detect(text)
        totals[lang, kind] += 1
        flagged[lang, kind] += code is not None
        right[lang, kind] += code == lang
        if code != lang:
            missed.append(f"- `{lang}` {kind}: {text!r} -> {code}")
    print(f"\n## Other languages ({path.relative_to(REPO_ROOT)})\n")
    print("| language | hostile named | benign named | named as this language |")
    print("|---|---|---|---|")
    for lang in dict.fromkeys(lang for _, lang, _ in lines):
        h, b = (lang, "hostile"), (lang, "benign")
        print(f"| {lang} | {flagged[h]}/{totals[h]} | {flagged[b]}/{totals[b]} "
              f"| {right[h] + right[b]}/{totals[h] + totals[b]} |")  # fmt: skip
    for kind in ("hostile", "benign"):
        n = sum(v for (_, k), v in totals.items() if k == kind)
        hit = sum(v for (_, k), v in flagged.items() if k == kind)
        print(f"| all, {kind} | {hit}/{n} = {hit / n:.1%} | | |")
    print("\nNot named as their own language:\n")
    print("\n".join(missed) or "(none)")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.language", description=__doc__)
    parser.add_argument("--split", choices=realdata.SPLITS, default="test")
    args = parser.parse_args(argv)
    gate = LanguageGate()
    print(f"# Language gate: candidates {', '.join(gate.candidates)}; at least "
          f"{gate.min_letters} letters in {gate.min_words} words, supported share <= "
          f"{gate.max_supported}, top language >= {gate.min_confidence}")  # fmt: skip
    english(gate, args.split)
    for path in OTHER_LANGUAGES:
        other_languages(gate, path)


if __name__ == "__main__":
    main()
