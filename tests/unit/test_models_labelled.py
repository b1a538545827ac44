"""The labelled research data: cleaning, the pinned files, splits and training targets."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from pathlib import Path

import pytest

from models.evaluation import realeval
from models.lines import corpus, overlap, realdata
from models.sources import labelled
from moderator.normalize import normalize_text

LABELS = corpus.LABELS


def _key(text: str) -> str:
    return normalize_text(text).lower()


def test_tweets_lose_retweet_prefixes_mentions_urls_and_entities() -> None:
    raw = '!!! RT @some_user: you &amp;amp; @other are a joke http://t.co/x1 &#128567;"'
    assert labelled.clean_tweet(raw) == "you & are a joke 😷"
    assert labelled.clean_tweet('she said "hi" to me') == 'she said "hi" to me'


def test_prompt_lines_split_into_their_statements() -> None:
    line = "- first one\\n- second, with a comma\\n- third!- fourth\\\\\\n-"
    assert labelled.split_prompt(line) == ["first one", "second, with a comma", "third!", "fourth"]
    assert labelled.split_prompt("a non-binary person") == ["a non-binary person"]


def _shower(files: dict[str, str]) -> labelled.Show:
    return lambda path: files[path].encode("utf-8")


def test_toxigen_statements_are_deduplicated_across_prompts_and_groups() -> None:
    files = {
        "prompts/hate_women_1k.txt": "- x are bad\\n- y are worse\\n-\n- X  are BAD\\n-\n",
        "prompts/hate_trans_1k.txt": "- x are bad\\n- both ways\\n-\n",
        "prompts/neutral_women_1k.txt": "- x are people\\n- both ways\\n-\n",
    }
    rows = labelled.prepare_toxigen(_shower(files), list(files))
    by_text = {text: (label, groups) for text, label, groups in rows}
    assert by_text == {
        "x are bad": ("hate", "trans,women"),
        "y are worse": ("hate", "women"),
        "x are people": ("neutral", "women"),
    }  # "both ways" sits under both labels: dropped


def test_davidson_keeps_votes_and_the_first_of_each_normalised_tweet() -> None:
    csv_text = (
        ",count,hate_speech,offensive_language,neither,class,tweet\n"
        "0,3,2,1,0,0,RT @a: those people are vermin\n"
        "1,3,0,3,0,1,@b THOSE people are   vermin\n"
        "2,3,0,0,3,2,nice game today\n"
        "3,3,0,0,3,2,@c\n"
    )
    rows = labelled.prepare_davidson(_shower({"data/labeled_data.csv": csv_text}))
    assert rows == [
        ["those people are vermin", "hate", "3", "2", "1", "0"],
        ["nice game today", "neither", "3", "0", "0", "3"],
    ]


def test_ethos_comments_carry_their_violence_share_when_rated() -> None:
    binary = "comment;isHate\nkill them all;1.0\nnice video;0.0\nnice video ;0.0\n"
    multi = "comment;violence;directed_vs_generalized\nkill them all;0.8333333;0\n"
    files = dict(zip(labelled.ETHOS.paths, (binary, multi), strict=True))
    rows = labelled.prepare_ethos(_shower(files))
    assert rows == [["kill them all", "1", "0.8333"], ["nice video", "0", ""]]


def test_openai_texts_keep_their_rated_labels_and_lose_sexual_minors() -> None:
    import gzip
    import json

    records = [
        {"prompt": "I will  find you", "V": 1, "HR": 0, "V2": 0},
        {"prompt": "a text about a minor", "S": 1, "S3": 1},
        {"prompt": "nice weather", "H": 0, "HR": 0, "V": 0, "SH": 0},
    ]
    data = gzip.compress("\n".join(json.dumps(r) for r in records).encode())
    rows = labelled.prepare_openai_moderation(lambda path: data)
    assert rows == [["I will find you", "V", "V,HR,V2"], ["nice weather", "", "H,V,HR,SH"]]


def test_stormfront_keeps_hate_and_nohate_sentences_only() -> None:
    files = {
        "annotations_metadata.csv": "file_id,user_id,subforum_id,num_contexts,label\n"
        "1_1,9,9,0,noHate\n1_2,9,9,2,hate\n1_3,9,9,0,relation\n1_4,9,9,0,idk/skip\n",
        "all_files/1_1.txt": "Hello  everyone .\n",
        "all_files/1_2.txt": "They are a plague .",
        "all_files/1_3.txt": "And they do .",
        "all_files/1_4.txt": "??",
    }
    rows = labelled.prepare_stormfront(_shower(files))
    assert rows == [["Hello everyone .", "noHate", "0"], ["They are a plague .", "hate", "2"]]


def test_hatemoji_pairs_join_an_original_with_every_perturbation_across_files() -> None:
    head = (
        "entry_id,text,type,target,round.base,round.set,set,split,label_gold,"
        "matched_text,matched_id\n"
    )
    files = {
        "HatemojiBuild/train.csv": head
        + "4,i hate 🐀,derogation,['bla'],5,5a,original,train,1,,5\n"
        + "5,i love 🐀,none,['none'],5,5a,perturbation,train,0,,7\n"
        + "9,same  text,none,['none'],5,5a,original,train,0,,\n",
        "HatemojiBuild/validation.csv": head
        + "7,i love 👨🏿,none,['none'],5,5a,perturbation,dev,0,,4\n"
        + "8,same text,derogation,\"['bla', 'wom']\",5,5a,original,dev,1,,\n",
        "HatemojiBuild/test.csv": head,
    }
    rows = labelled.prepare_hatemoji(_shower(files))
    assert rows == [
        ["i hate 🐀", "hate", "derogation", "bla", "4", "original"],
        ["i love 🐀", "not_hate", "none", "none", "4", "perturbation"],
        ["i love 👨🏿", "not_hate", "none", "none", "4", "perturbation"],
    ]  # "same text" had both labels: dropped


def test_hatexplain_tokens_are_joined_without_placeholders() -> None:
    head = "post_tokens,toxic_tokens,post_label\n"
    files = {
        labelled.HATEXPLAIN.paths[0]: head
        + "\"['<user>', 'they', 'are', '<number>', 'rats']\",\"[0]\",hatespeech\n",
        labelled.HATEXPLAIN.paths[1]: head + "\"['good', 'game']\",\"[0]\",normal\n",
    }
    rows = labelled.prepare_hatexplain(_shower(files))
    assert rows == [["they are rats", "hatespeech"], ["good game", "normal"]]


def test_sbic_posts_average_their_annotators() -> None:
    cols = "offensiveYN,whoTarget,targetMinority,post\n"
    files = {
        labelled.SBIC.paths[0]: cols
        + "1.0,1.0,women,They  belong in the kitchen\n"
        + "0.5,0.0,,They  belong in the kitchen\n"
        + "0.0,,,nice weather\n"
    }
    rows = labelled.prepare_sbic(_shower(files))
    assert rows == [
        ["They belong in the kitchen", "0.75", "0.5", "women", "2"],
        ["nice weather", "0", "", "", "1"],
    ]


def test_tsv_round_trips_and_refuses_tabs() -> None:
    cols = ("text", "label")
    rows = [["say \"hi\" 'there'", "hate"], ["plain", "neutral"]]
    assert labelled.parse_tsv(labelled.write_tsv(rows, cols), cols) == [
        dict(zip(cols, r, strict=True)) for r in rows
    ]
    with pytest.raises(ValueError, match="tab"):
        labelled.write_tsv([["a\tb", "hate"]], cols)
    with pytest.raises(ValueError, match="header"):
        labelled.parse_tsv("x\ty\n", cols)


FIXTURE = {
    "davidson": [
        ["go back where you came from, vermin", "hate", "3", "3", "0", "0"],
        ["you fucking hoe", "offensive", "3", "0", "3", "0"],
        ["what a game last night", "neither", "3", "0", "0", "3"],
    ],
    "toxigen": [
        ["they should all be sent away", "hate", "immigrant"],
        ["many immigrants start businesses", "neutral", "immigrant"],
        # the same words as a Davidson line: one split whatever the source
        ["What a game last night", "neutral", "women"],
    ],
    "ethos": [
        ["we should shoot them all", "1", "0.9"],
        ["they are a disease", "0.8333", "0.1"],
        ["they are all a bit odd", "0.3333", ""],
        ["great video", "0", ""],
    ],
    "openai_moderation": [
        ["i will find you and hurt you", "V,HR", "H,V,HR,SH,V2"],
        ["they are animals", "H", "H,V,HR,SH"],
        ["an account of my own scars", "SH", "V,HR,SH,V2"],
        ["lovely day at the lake", "", "H,V,HR,SH,V2"],
        ["rated on violence only", "", "V,V2"],
    ],
    "stormfront": [
        ["they are a plague on this land", "hate", "0"],
        ["welcome to the forum", "noHate", "0"],
    ],
    "hatemoji": [
        ["i want to 🔪 all of them", "hate", "threateninglanguage", "wom", "1", "original"],
        ["i want to 🎂 all of them", "not_hate", "none", "none", "1", "perturbation"],
        ["they are 🐀", "hate", "derogation", "jew", "3", "original"],
    ],
    "hatexplain": [
        ["they are all animals", "hatespeech"],
        ["shut up you idiot", "offensive"],
        ["nice weather today", "normal"],
        # an evaluation line quoted inside a longer post: left out by decontaminate
        ["lol welcome to the forum my friend", "normal"],
    ],
    "sbic": [
        ["women belong in the kitchen", "1", "1", "women", "3"],
        ["i had a long day at work", "0", "", "", "3"],
        ["that joke was kind of rude", "0.3333", "0", "", "3"],
    ],
}


def _write_fixture(root: Path) -> dict[str, labelled.Labelled]:
    """The fixture as pinned files, and the sources pinned to them."""
    pinned = {}
    for name, rows in FIXTURE.items():
        source = labelled.SOURCES[name]
        folder = root / name
        folder.mkdir(parents=True)
        data = labelled.write_tsv(rows, source.columns).encode()
        (folder / source.tsv).write_bytes(data)
        (folder / labelled.LICENCE_FILE).write_text(f"licence of {name}\n")
        pinned[name] = dataclasses.replace(
            source,
            sha256=hashlib.sha256(data).hexdigest(),
            licence_sha256=hashlib.sha256(f"licence of {name}\n".encode()).hexdigest(),
        )
    return pinned


@pytest.fixture
def fixture_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, source in _write_fixture(tmp_path).items():
        monkeypatch.setattr(labelled, name.upper(), source)
        monkeypatch.setitem(labelled.SOURCES, name, source)
    return tmp_path


def test_the_pinned_files_and_their_licence_must_be_there_and_unchanged(
    fixture_dir: Path,
) -> None:
    assert len(labelled.davidson(fixture_dir)) == len(FIXTURE["davidson"])
    (fixture_dir / "toxigen" / labelled.LICENCE_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="LICENSE"):
        labelled.toxigen(fixture_dir)
    with (fixture_dir / "ethos" / "ethos.tsv").open("a") as f:
        f.write("one more line\t0\t\n")
    with pytest.raises(ValueError, match="sha256"):
        labelled.ethos(fixture_dir)


def test_labelled_lines_get_families_gold_and_targets(fixture_dir: Path) -> None:
    lines = {ln.text: ln for ln in realdata.labelled_lines(fixture_dir)}
    ia, tox, thr, obs = (
        LABELS.index(k) for k in ("identity_attack", "toxicity", "threat", "obscene")
    )
    hate = lines["go back where you came from, vermin"]
    assert (hate.family, hate.toxic) == ("hate", True)
    assert (hate.target[ia], hate.target[tox]) == (1.0, 1.0)
    offensive = lines["you fucking hoe"]
    assert (offensive.family, offensive.toxic) == ("offensive", False)
    assert offensive.target[ia] == 0.0  # the teachers decide (distillation), not the label
    assert lines["they should all be sent away"].target[ia] == 1.0
    assert max(lines["many immigrants start businesses"].target) == 0.0
    threat = lines["we should shoot them all"]
    assert (threat.family, threat.toxic, threat.target[thr]) == ("threat", True, 0.9)
    assert lines["they are a disease"].family == "hate"
    assert "they are all a bit odd" not in lines  # a minority called it hate: left out
    assert (lines["great video"].family, lines["great video"].toxic) == ("not_hate", False)
    assert all(ln.split != "train" for ln in lines.values() if ln.source == "ethos")
    assert lines["you fucking hoe"].target[obs] == 1.0
    families = {t: ln.family for t, ln in lines.items() if ln.source == "openai_moderation"}
    assert families == {
        "i will find you and hurt you": "threat",
        "they are animals": "hate",
        "an account of my own scars": "self_harm",
        "lovely day at the lake": "benign",
    }  # unrated on hate, harassment or self-harm: neither gold nor benign
    assert {lines[t].split for t in families} == {"test"}  # a published test set
    plague, welcome = lines["they are a plague on this land"], lines["welcome to the forum"]
    assert (plague.family, plague.toxic, plague.target[ia]) == ("hate", True, 1.0)
    assert (welcome.family, welcome.toxic) == ("no_hate", False)
    assert "train" not in {plague.split, welcome.split}
    # The same words from two sources land in one split.
    same = [ln for ln in lines_all(fixture_dir) if _key(ln.text) == _key("what a game last night")]
    assert len(same) == 2
    assert len({ln.split for ln in same}) == 1


def test_stance_sources_get_families_targets_and_pair_splits(fixture_dir: Path) -> None:
    (fixture_dir / overlap.SUITE_OVERLAP).write_text(
        "source\tid\tsuite\n"
        f"hatemoji\t{overlap.line_id('hatemoji', 'they are 🐀')}\thatemojicheck\n"
    )
    realdata.REMOVED.clear()
    lines = {ln.text: ln for ln in realdata.decontaminate(lines_all(fixture_dir), fixture_dir)}
    ia, thr = LABELS.index("identity_attack"), LABELS.index("threat")
    knife, cake = lines["i want to 🔪 all of them"], lines["i want to 🎂 all of them"]
    assert (knife.family, knife.toxic, knife.target[thr], knife.target[ia]) == (
        "threat",
        True,
        1.0,
        1.0,
    )
    assert (cake.family, cake.toxic, max(cake.target)) == ("neutral", False, 0.0)  # about women
    assert knife.split == cake.split  # one pair, one split
    assert "they are 🐀" not in lines  # listed in suite_overlap.tsv
    assert lines["they are all animals"].family == "hate"
    assert lines["shut up you idiot"].family == "offensive"
    assert max(lines["nice weather today"].target) == 0.0
    assert "lol welcome to the forum my friend" not in lines  # holds a Stormfront line
    assert lines["women belong in the kitchen"].family == "hate"
    assert lines["i had a long day at work"].family == "not_offensive"
    assert "that joke was kind of rude" not in lines  # neither offensive by most nor by none
    assert realdata.REMOVED == {
        ("hatemoji", "hatemojicheck"): 1,
        ("hatexplain", "evaluation lines"): 1,
    }


def lines_all(folder: Path) -> list[realdata.Line]:
    return realdata.labelled_lines(folder)


def test_training_keeps_eval_only_sources_out_and_caps_offensive_tweets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def line(text: str, source: str, family: str, toxic: bool = False) -> realdata.Line:
        return realdata.Line(text, source, "train", toxic, family, (0.0,) * len(LABELS))

    offensive = [line(f"offensive tweet {i}", "davidson", "offensive") for i in range(10)]
    lines = [
        *offensive,
        line("hateful tweet", "davidson", "hate", True),
        line("an emoji attack", "hatemoji", "hate", True),
        line("the same frame, no attack", "hatemoji", "neutral"),
        line("an ethos comment that is somehow in train", "ethos", "hate", True),
        dataclasses.replace(line("neutral statement", "toxigen", "neutral"), split="dev"),
    ]
    monkeypatch.setitem(realdata.FAMILY_CAPS, ("davidson", "offensive"), 4)
    counts: dict[str, dict[str, int]] = {}
    got = realdata.training_lines(lines, counts=counts)
    texts = Counter(t for t, _ in got)
    assert sum(1 for t in texts if t.startswith("offensive tweet")) == 4
    assert texts["hateful tweet"] == 2  # hateful lines are seen twice, as rude lines are
    # the lines that contrast an attack with talk about a group, CONTRAST_REPEAT times as often
    assert texts["the same frame, no attack"] == realdata.CONTRAST_REPEAT
    assert texts["an emoji attack"] == 2 * realdata.CONTRAST_REPEAT
    assert "neutral statement" not in texts  # dev is never trained on
    assert counts["davidson"] == {"lines": 5, "rude": 1}
    # An ablation leaves a source's train split out, and only that source's.
    ablated = Counter(t for t, _ in realdata.training_lines(lines, without=("davidson",)))
    assert set(ablated) == {"an emoji attack", "the same frame, no attack"}
    kept = Counter(t for t, _ in realdata.training_lines(lines, without=("toxigen",)))
    assert kept == texts
    without = Counter(t for t, _ in realdata.training_lines(lines, without=("hatemoji",)))
    assert "an emoji attack" not in without


def test_the_committed_or_shared_files_match_their_pins() -> None:
    """On the real files: counts, no duplicates, one split per line, a licence beside each."""
    folder = labelled.data_dir()
    missing = [n for n, s in labelled.SOURCES.items() if not (folder / n / s.tsv).is_file()]
    assert not missing, f"{missing} not in {folder}: they are committed in models/data/labelled"
    for name, source in labelled.SOURCES.items():
        rows = labelled.read_rows(source)  # checks both sha256s
        assert len(rows) == source.rows
        assert (folder / name / labelled.LICENCE_FILE).stat().st_size > 0
        keys = [_key(r["text"]) for r in rows]
        assert len(set(keys)) == len(keys)
    lines = realdata.labelled_lines()
    trained = {_key(ln.text) for ln in lines if ln.split == "train"}
    # Within the trained sources a text has one split; eval-only ones never train, and the
    # few texts they share with a trained line are dropped when all sources load together.
    assert not any(
        _key(ln.text) in trained
        for ln in lines
        if ln.split != "train" and ln.source not in realdata.EVAL_ONLY
    )
    assert not any(ln.split == "train" for ln in lines if ln.source in realdata.EVAL_ONLY)
    test_threats = [
        ln
        for ln in lines
        if ln.family == realdata.THREAT and ln.split == "test" and ln.source in realdata.FIXED
    ]
    assert len(test_threats) >= realeval.THREAT_SET_MIN  # issue 27's held-out threat set
    assert {ln.source for ln in test_threats} == {"ethos", "openai_moderation"}


def test_report_targets_judge_the_pooled_labelled_figures() -> None:
    from models.reports import report

    def rates(lines: int, flagged: float) -> dict[str, float]:
        return {"lines": lines, "flagged": flagged, "blocked": 0.0}

    pooled = {
        "hateful": rates(700, 0.9),
        "threat": rates(150, 0.7),
        "group_neutral": rates(80, 0.1),
    }
    rows = report._labelled_targets({"labelled": {"pooled": pooled}})
    assert [ok for _, _, ok in rows] == [True, False, False]
    assert "fewer than the 200 asked" in rows[2][0]
    pooled["threat"] = rates(204, 0.9)
    assert "fewer" not in report._labelled_targets({"labelled": {"pooled": pooled}})[2][0]
    assert report._labelled_targets({}) == []  # a report from before the labelled data


def test_offensive_tweets_are_not_trained_on() -> None:
    # Distilled, they taught the first labelled build that casual rude register is an insult.
    def line(text: str, family: str) -> realdata.Line:
        return realdata.Line(
            text, "davidson", "train", family == "hate", family, (0.0,) * len(LABELS)
        )

    lines = [line(f"offensive tweet {i}", "offensive") for i in range(5)]
    lines += [line("hateful tweet", "hate"), line("plain tweet", "neither")]
    texts = {t for t, _ in realdata.training_lines(lines)}
    assert texts == {"hateful tweet", "plain tweet"}


def test_the_evaluation_pools_of_the_first_five_sources_stay_fixed() -> None:
    """Their test lines are written down (test_lines.tsv); a source added later moves none."""
    pinned = (labelled.data_dir() / overlap.TEST_LINES).read_text().splitlines()
    assert pinned[0] == "source\tid"
    lines = realdata.decontaminate(realdata.labelled_lines())
    now = {
        f"{ln.source}\t{overlap.line_id(ln.source, ln.text)}"
        for ln in lines
        if ln.split == "test" and ln.source not in realdata.STANCE
    }
    assert now == set(pinned[1:])
    assert len(now) > 15_000


def test_the_stance_sources_repeat_no_evaluation_text() -> None:
    lines = realdata.decontaminate(realdata.labelled_lines())
    judged = overlap.Overlap(
        ln.text
        for ln in lines
        if ln.source not in realdata.STANCE
        and (ln.source in realdata.EVAL_ONLY or ln.split != "train")
    )
    stance = [ln for ln in lines if ln.source in realdata.STANCE]
    assert len(stance) > 20_000
    assert not any(judged.hits(ln.text) for ln in stance)
    assert realdata.REMOVED[("sbic", "evaluation lines")] > 0  # Stormfront and Davidson inside


def test_hatemoji_pairs_share_a_split() -> None:
    rows = labelled.hatemoji()
    split_of = {}
    for line, (_text, _label, _kind, _targets, pair) in zip(
        realdata._hatemoji(rows), rows, strict=True
    ):
        assert split_of.setdefault(pair, line.split) == line.split
    assert set(split_of.values()) == set(realdata.SPLITS)


@pytest.mark.parametrize(
    ("evaluation", "line", "hit"),
    [
        ("They are a plague.", "they are a PLAGUE", True),  # equal after normalising
        ("you people are all the same", "lol you people are all the same honestly", True),
        ("good game", "good game everyone", False),  # under MIN_CONTAINED words: equality only
        ("i think all of them should leave this country now", "leave this country", False),
        (
            "i think all of them should leave this country now and never return",
            "look, all of them should leave this country now and never return ok",
            True,  # a shared run of RUN words
        ),
        ("they should all leave", "i think that they should all leave today", True),
        ("a post about rats and how we should deal with them", "rats and how we should", True),
    ],
)
def test_overlap_finds_equal_contained_and_quoted_texts(
    evaluation: str, line: str, hit: bool
) -> None:
    assert overlap.Overlap([evaluation]).hits(line) is hit


def test_stance_figures_f1_and_small_pool_intervals() -> None:
    import numpy as np

    from models.evaluation import stance

    flagged = np.asarray([True, True, False, False])
    gold = np.asarray([True, False, True, False])
    assert stance.f1(flagged, gold) == 0.5
    assert stance.interval(np.ones(1_000, dtype=bool)) == ""  # large pools: none
    lo, hi = stance.interval(np.asarray([True, False] * 50)).strip(" []").split(", ")
    assert float(lo.rstrip("%")) < 50 < float(hi.rstrip("%"))
