"""The non-English labelled sources: cleaning, label mapping, pinned files, the suite overlap."""

from __future__ import annotations

import dataclasses
import io
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from models.lines import corpus, overlap, realdata
from models.lines import multilingual_prepare as prep
from models.sources import labelled, multilingual
from moderator.normalize import normalize_text

LABELS = corpus.LABELS


def _key(text: str) -> str:
    return normalize_text(text).lower()


def _shower(files: dict[str, bytes]) -> labelled.Show:
    return lambda path: files[path]


def test_cold_keeps_short_comments_with_the_test_files_finer_label() -> None:
    train = ",split,topic,label,TEXT\n1,train,race,1,我讨厌他们\n2,train,race,0," + "长" * 61 + "\n"
    test = ",split,topic,label,fine-grained-label,TEXT\n3,test,race,0,3,别歧视 他们\n"
    files = dict(zip(multilingual.COLD.paths, (train, "x,y\n", test), strict=True))
    rows = prep.prepare_cold(_shower({k: v.encode() for k, v in files.items()}))
    assert rows == [
        ["我讨厌他们", "zh", "offensive", "", ""],
        ["别歧视 他们", "zh", "safe", "anti_bias", ""],
    ]


def test_germeval_loses_line_break_markers_and_mentions() -> None:
    training = "@a Du bist|LBR|ein Idiot\tOFFENSE\tINSULT\nSchönes Wetter\tOTHER\tOTHER\n"
    files = dict(zip(multilingual.GERMEVAL.paths, (training, ""), strict=True))
    rows = prep.prepare_germeval(_shower({k: v.encode() for k, v in files.items()}))
    assert rows == [
        ["Du bist ein Idiot", "de", "INSULT", "OFFENSE", ""],
        ["Schönes Wetter", "de", "OTHER", "OTHER", ""],
    ]


def test_trac_leaves_covert_aggression_out() -> None:
    data = "id1,tu chutiya hai,OAG\nid2,sab log yahan,CAG\nid3,kal milte hai,NAG\n"
    files = {p: data.encode() for p in multilingual.TRAC.paths}
    rows = prep.prepare_trac(_shower(files))
    assert [r[2] for r in rows] == ["OAG", "NAG", "OAG", "NAG"]  # both files; CAG gone
    assert rows[0] == ["tu chutiya hai", "hi", "OAG", "", ""]


def test_mlma_reads_both_languages_from_the_archive_with_target_and_group() -> None:
    header = "HITId,tweet,sentiment,directness,annotator_sentiment,target,group\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "hate_speech_mlma/ar_dataset.csv", header + "1,نص @user,hateful,d,s,origin,arabs\n"
        )
        fr = "1,rt @user t'es nul @url,offensive,d,s,other,individual\n"
        archive.writestr("hate_speech_mlma/fr_dataset.csv", header + fr)
    rows = prep.prepare_mlma(_shower({multilingual.MLMA.paths[0]: buffer.getvalue()}))
    assert rows == [
        ["نص", "ar", "hateful", "origin;arabs", ""],
        ["t'es nul", "fr", "offensive", "other;individual", ""],
    ]


def test_gahd_drops_translations_and_pairs_a_sentence_with_its_rewrites() -> None:
    data = (
        "gahd_id,text,label,round,source,split,contrastive_gahd_id\n"
        "b1,Die sind Ungeziefer,1,R1,dynabench,train,\n"
        "a2,Die sind Nachbarn,0,R1,contrastive,train,b1\n"
        "c3,Ich hasse Schwule,1,R1,translation,train,\n"
        "d4,Heute regnet es,0,R2,news,dev,\n"
    )
    rows = prep.prepare_gahd(_shower({multilingual.GAHD.paths[0]: data.encode()}))
    assert rows == [
        ["Die sind Ungeziefer", "de", "hate", "dynabench", "a2"],
        ["Die sind Nachbarn", "de", "not_hate", "contrastive", "a2"],
        ["Heute regnet es", "de", "not_hate", "news", ""],
    ]


@pytest.mark.parametrize(
    ("name", "label", "detail", "family", "target"),
    [
        ("cold", "offensive", "", "hate", {"identity_attack": 1.0, "toxicity": 1.0}),
        ("cold", "offensive", "attack_individual", "insult", {"insult": 1.0, "toxicity": 1.0}),
        ("cold", "safe", "anti_bias", "counter", {}),
        ("germeval", "ABUSE", "OFFENSE", "abuse", {"toxicity": 1.0}),
        ("germeval", "PROFANITY", "OFFENSE", "profanity", {"obscene": 1.0}),
        ("trac", "OAG", "", "aggression", {"toxicity": 1.0, "insult": 0.7}),
        (
            "mlma",
            "abusive_hateful",
            "origin;arabs",
            "hate",
            {"identity_attack": 1.0, "toxicity": 1.0},
        ),
        ("mlma", "offensive", "other;individual", "offensive", {"insult": 1.0, "toxicity": 1.0}),
        ("mlma", "disrespectful", "gender;women", "offensive", {"toxicity": 1.0}),
        ("mlma", "normal", "other;other", "benign", {}),
        ("gahd", "not_hate", "news", "benign", {}),
    ],
)
def test_source_labels_map_to_our_families_and_targets(
    name: str, label: str, detail: str, family: str, target: dict[str, float]
) -> None:
    assert multilingual.family_of(name, label, detail) == (family, target)


@pytest.mark.parametrize(
    ("name", "label"), [("trac", "CAG"), ("mlma", "offensive_normal"), ("mlma", "fearful")]
)
def test_disputed_or_unhostile_labels_are_left_out(name: str, label: str) -> None:
    assert multilingual.family_of(name, label, "other;other") is None


def test_chinese_overlaps_by_characters_from_seven_of_them() -> None:
    index = prep._CharOverlap(["我讨厌黑人。", "所有女人都应该被消灭"])
    assert index.hits("我讨厌黑人！")  # equal letters, other punctuation
    assert not index.hits("我讨厌黑人，我不怕被喷")  # a 5-character case inside: too short
    assert index.hits("我觉得所有女人都应该被消灭吧")  # a 10-character case inside
    assert index.hits("女人都应该被消灭")  # the line (8) inside a case
    assert not index.hits("今天天气很好")


def _write(root: Path, tables: dict[str, list[list[str]]], listed: list[tuple[str, str]]) -> None:
    for name, rows in tables.items():
        folder = root / name
        folder.mkdir(parents=True)
        (folder / f"{name}.tsv").write_text(labelled.write_tsv(rows, multilingual.COLUMNS))
        (folder / labelled.LICENCE_FILE).write_text("licence\n")
    found = [(name, overlap.line_id(name, text), "multilingual_hatecheck") for name, text in listed]
    (root / multilingual.OVERLAP_FILE).write_text(
        labelled.write_tsv(found, overlap.SUITE_OVERLAP_COLUMNS)
    )


@pytest.fixture
def fixture_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tables = {
        "cold": [["我讨厌黑人", "zh", "offensive", "", ""], ["今天天气很好", "zh", "safe", "", ""]],
        "germeval": [["Du Idiot", "de", "INSULT", "OFFENSE", ""]],
        "trac": [["tu pagal hai", "hi", "OAG", "", ""]],
        "mlma": [["t'es nul", "fr", "offensive_normal", "other;other", ""]],
        "gahd": [
            ["Die sind Ungeziefer", "de", "hate", "dynabench", "a2"],
            ["Die sind Nachbarn", "de", "not_hate", "contrastive", "a2"],
        ],
    }
    _write(tmp_path, tables, [("cold", "我讨厌黑人")])
    for name, source in multilingual.SOURCES.items():
        monkeypatch.setitem(
            multilingual.SOURCES, name, dataclasses.replace(source, sha256="", licence_sha256="")
        )
    return tmp_path


def test_the_reader_drops_the_lines_listed_as_overlapping_the_suite(fixture_dir: Path) -> None:
    kept = {r.text for r in multilingual.rows(fixture_dir)}
    assert "我讨厌黑人" not in kept
    assert "今天天气很好" in kept
    assert "我讨厌黑人" in {r.text for r in multilingual.rows(fixture_dir, drop=False)}


def test_lines_carry_language_gold_targets_and_pair_splits(fixture_dir: Path) -> None:
    lines = {ln.text: ln for ln in realdata.multilingual_lines(fixture_dir)}
    assert "t'es nul" not in lines  # annotators disagreed: left out
    insult = lines["Du Idiot"]
    assert (insult.source, insult.family, insult.toxic) == ("germeval_de", "insult", True)
    assert insult.target[LABELS.index("insult")] == 1.0
    assert lines["今天天气很好"].target == (0.0,) * len(LABELS)
    assert lines["tu pagal hai"].source == "trac_hi"
    pair = lines["Die sind Ungeziefer"], lines["Die sind Nachbarn"]
    assert pair[0].split == pair[1].split == realdata.split_of("gahd pair a2")


def test_the_committed_files_match_their_pins_and_the_overlap_list() -> None:
    """On the real files: row counts, licences, no text twice in a source, and every listed
    overlapping line present in its source yet never read."""
    licences = {"Apache-2.0": "Apache License", "CC BY 4.0": "Attribution 4.0", "MIT": "MIT"}
    for name, source in multilingual.SOURCES.items():
        rows = labelled.read_rows(source)  # checks both sha256s
        assert len(rows) == source.rows
        keys = [_key(r["text"]) for r in rows]
        assert len(set(keys)) == len(keys)
        licence = (labelled.data_dir() / name / labelled.LICENCE_FILE).read_text()
        assert licences[source.licence.split(" (")[0]] in licence
    listed = multilingual.overlapping()
    assert Counter(name for name, _ in listed) == {"cold": 3, "gahd": 4}
    every = {(r.dataset, overlap.line_id(r.dataset, r.text)) for r in multilingual.rows(drop=False)}
    read = {(r.dataset, overlap.line_id(r.dataset, r.text)) for r in multilingual.rows()}
    assert listed <= every
    assert not listed & read


def test_no_held_out_text_is_trained_on() -> None:
    lines = realdata.multilingual_lines()
    trained = {_key(ln.text) for ln in lines if ln.split == "train"}
    assert trained
    assert not any(_key(ln.text) in trained for ln in lines if ln.split != "train")
    assert {ln.source for ln in lines} == {
        "cold_zh", "gahd_de", "germeval_de", "mlma_ar", "mlma_fr", "trac_hi",
    }  # fmt: skip


def _english(text: str, split: str, toxic: bool) -> realdata.Line:
    target = tuple(1.0 if toxic and lb in ("toxicity", "insult") else 0.0 for lb in LABELS)
    return realdata.Line(text, "toxigen", split, toxic, "hate" if toxic else "neutral", target)


def test_the_e5_recipe_gains_the_train_split_and_minilm_is_unchanged(
    fixture_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models.training import encoders

    monkeypatch.setenv(labelled.DATA_ENV, str(fixture_dir))
    real = [
        _english("you people are vermin", "train", True),
        _english("nice game", "train", False),
        _english("held out line", "dev", False),
    ]
    shared = realdata.training_lines(real)
    assert encoders.training_lines("minilm", real) == shared
    counts: dict[str, dict[str, int]] = {}
    e5 = encoders.training_lines("e5", real, counts=counts)
    assert e5[: len(shared)] == shared
    lines = realdata.multilingual_lines()
    train = [ln for ln in lines if ln.split == "train"]
    assert train  # the fixture holds train lines
    assert Counter(t for t, _ in e5[len(shared) :]) == {
        ln.text: 2 if ln.toxic else 1 for ln in train
    }  # hostile lines twice, like every labelled source's
    assert dict(e5[len(shared) :]) == {ln.text: ln.target for ln in train}  # gold, not distilled
    held = {ln.text for ln in lines if ln.split != "train"}
    assert not held & {t for t, _ in e5}
    assert sum(c["lines"] for name, c in counts.items() if "_" in name) == len(train)


def test_the_english_sources_and_their_pools_hold_no_non_english_source() -> None:
    assert not set(multilingual.SOURCES) & set(labelled.SOURCES)
    names = {f"{name}_" for name in multilingual.SOURCES}
    assert not any(ln.source.startswith(tuple(names)) for ln in realdata.labelled_lines())


def test_the_datasheet_and_third_party_notice_name_every_source_and_its_licence() -> None:
    from models.reports import datasheet

    section = "\n".join(multilingual.datasheet_section(datasheet._multilingual_counts(), {}))
    notice = (Path(__file__).parents[2] / "THIRD_PARTY.md").read_text()
    for source in multilingual.SOURCES.values():
        assert f"`{source.repo}` @ `{source.commit[:7]}`" in section
        assert f"`{source.repo}` @ `{source.commit[:7]}`" in notice
        assert source.licence in section
    assert "the e5 recipe only" in datasheet.render([], {}, {})
