"""multilingual-e5-small with a vocabulary that fits: the pieces the build reads, and no others.

The full table is 250,037 rows x 384 (384 MB in fp32, 96 MB in int8): more than the shipped
model's 80 MB alone. Most rows are pieces of languages and scripts chat never shows this model.
`kept_ids` keeps, in their original order:
- the special pieces (`<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>`);
- every single-character piece, so no character that had a piece becomes `<unk>` (XLM-R has no
  byte fallback: a dropped character would be unknown, not spelled);
- every piece the given texts produce with the full vocabulary (the build's text);
- the `top` highest-scoring other pieces, the unigram model's most frequent, so that text the
  build never saw still meets the pieces it would have used.

What that guarantees: a kept piece keeps its score and its embedding row, and each text given
tokenizes exactly as with the full vocabulary. A unigram tokenizer takes the best-scoring
segmentation; removing pieces removes only other segmentations, never the best one, which
uses kept pieces alone (checked on the real folder in tests). Other text may change: a removed
piece is spelled with kept, shorter ones (`python -m models.training.encoders` measures that
per language).

`trim` writes the folder: `config.json` (vocab_size), `model.safetensors` (the word table's
kept rows), `tokenizer.json` (a Unigram over the kept pieces, ids renumbered, the same
normalizer), and `trimmed.json` last, naming what it was trimmed from and the kept ids' digest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from models.encoders import spm
from models.encoders.e5file import Vocabulary

STAMP = "trimmed.json"
WORD_TABLE = "embeddings.word_embeddings.weight"


def kept_ids(vocabulary: Vocabulary, produced: Iterable[Sequence[int]], top: int) -> list[int]:
    """The ids kept (module docstring), ascending: specials, single characters, every id in
    `produced` (the texts' ids under the full vocabulary) and the `top` best-scoring others."""
    v = vocabulary
    kept = {i for i, p in enumerate(v.pieces) if p in spm.SPECIALS or len(p) == 1}
    kept |= {v.bos, v.eos, v.pad, v.unk}
    for ids in produced:
        kept.update(ids)
    others = np.asarray([i for i in range(len(v.pieces)) if i not in kept], np.int64)
    order = np.argsort(-np.asarray(v.scores)[others], kind="stable")
    kept.update(int(i) for i in others[order[:top]])
    return sorted(kept)


def trimmed_vocabulary(vocabulary: Vocabulary, kept: Sequence[int]) -> Vocabulary:
    """The vocabulary of the `kept` ids only (ascending), renumbered 0..len(kept)-1."""
    v = vocabulary
    new = {old: i for i, old in enumerate(kept)}
    missing = [name for name, old in _specials(v).items() if old not in new]
    if missing:
        raise ValueError(f"the kept ids lack the special pieces {missing}")
    return Vocabulary(
        pieces=tuple(v.pieces[i] for i in kept),
        scores=np.asarray(v.scores)[np.asarray(kept, np.int64)],
        bos=new[v.bos],
        eos=new[v.eos],
        pad=new[v.pad],
        unk=new[v.unk],
        normalisation=dict(v.normalisation),
    )


def _specials(v: Vocabulary) -> dict[str, int]:
    return {"bos": v.bos, "eos": v.eos, "pad": v.pad, "unk": v.unk}


def digest(kept: Sequence[int]) -> str:
    """What `trimmed.json` records of a kept set: it decides whether a folder is current."""
    return hashlib.sha256(np.asarray(kept, np.int64).tobytes()).hexdigest()


def is_current(folder: Path, source: Path, kept: Sequence[int]) -> bool:
    """Whether `folder` holds the trim of `source` (its conversion stamp) to exactly `kept`."""
    stamp = folder / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()) == _stamp(source, kept)


def _stamp(source: Path, kept: Sequence[int]) -> dict[str, object]:
    converted = source / "converted.json"
    origin = json.loads(converted.read_text()) if converted.is_file() else {}
    return {"from": origin, "pieces": len(kept), "kept_sha256": digest(kept)}


def trim(vocabulary: Vocabulary, source: Path, folder: Path, kept: Sequence[int]) -> None:
    """Write the trimmed folder of the converted `source` folder (replaced whole, stamp last)."""
    from safetensors.numpy import load_file, save_file

    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    config = json.loads((source / "config.json").read_text())
    small = trimmed_vocabulary(vocabulary, kept)
    config.update(vocab_size=len(kept), pad_token_id=small.pad)
    config.update(bos_token_id=small.bos, eos_token_id=small.eos)
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    weights = load_file(str(source / "model.safetensors"))
    weights[WORD_TABLE] = np.ascontiguousarray(weights[WORD_TABLE][np.asarray(kept, np.int64)])
    save_file(weights, str(partial / "model.safetensors"), metadata={"format": "pt"})
    # compact: it ships, and indented it takes about twice the bytes
    spm.tokenizer(small).save(str(partial / "tokenizer.json"), pretty=False)
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    (folder / STAMP).write_text(json.dumps(_stamp(source, kept), indent=2) + "\n")
