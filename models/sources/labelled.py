"""Labelled research data from public GitHub repositories: hate, offensive language, threats.

No package registry ships these datasets and builds cannot reach GitHub, so each one is read once
from a snapshot of its repository at a pinned commit, cleaned here (`prepare`), and kept as a
small TSV beside the repository's own licence text in a data folder (`data_dir()`): one folder per
source holding `<name>.tsv` and `LICENSE`. The build reads those files only and checks them
against the sha256s pinned below, so every build reads the same lines, and a missing or changed
file stops it instead of silently training without the source.

Cleaning is per source (each `_clean_*` says what it undoes); every text is then
whitespace-collapsed and stripped, and de-duplicated by its normalised form (first occurrence
kept), so a statement that a source repeats (ToxiGen joins the same statements into many
prompts) counts once.

    python -m models.sources.labelled prepare davidson=GIT_DIR toxigen=GIT_DIR ... [--out DIR]

Each source names its repository, commit, files and licence below; DATA.md says how each is
used (trained on, or dev and test only, or test only), and `python -m models.lines.realdata` counts
each one's lines per family and split.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import html
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.files import REPO_ROOT
from moderator.normalize import normalize_text

DATA_ENV = "MODELS_LABELLED_DATA"
LICENCE_FILE = "LICENSE"
# The folder's name inside models/data/ or a shared/data/ beside the checkout.
DIRNAME = "labelled"

Show = Callable[[str], bytes]  # the bytes of a path in the repository at the pinned commit


@dataclass(frozen=True)
class Labelled:
    """One labelled dataset: where it comes from, under what terms, and the file the build reads."""

    name: str
    repo: str
    commit: str
    paths: tuple[str, ...]  # the upstream files the TSV is made from (globs allowed)
    licence_path: str  # the upstream licence file, copied verbatim as LICENSE
    licence: str
    sha256: str  # of <name>.tsv
    licence_sha256: str
    rows: int
    columns: tuple[str, ...]
    description: str
    provenance: str
    # Where the licence file is read when not from `repo` itself: (repository, commit).
    licence_repo: tuple[str, str] | None = None

    @property
    def tsv(self) -> str:
        return f"{self.name}.tsv"


DAVIDSON = Labelled(
    name="davidson",
    repo="t-davidson/hate-speech-and-offensive-language",
    commit="cb50f7e9eb855a99abc51423bf40df0e26d6fe30",
    paths=("data/labeled_data.csv",),
    licence_path="LICENSE",
    licence="MIT (repository LICENSE, Copyright (c) 2017 Tom Davidson); the tweets' text is"
    " Twitter users' own",
    sha256="5c860bc7ed3feb1e05a179687dd8f374bcd848e2b9aa5e60c2fadfe66be315b8",
    licence_sha256="3ec8d318cf9e36fe40da3081f5a64ebe3d198ebf85a330cbebc84de90a047fb2",
    rows=24_441,
    columns=("text", "label", "count", "hate", "offensive", "neither"),
    description="Tweets labelled hate speech / offensive language / neither by at least three"
    " CrowdFlower annotators (majority class and vote counts kept); HTML entities unescaped,"
    " retweet prefixes, @mentions and URLs removed, de-duplicated. The labels lean on slurs.",
    provenance="Davidson, Warmsley, Macy and Weber, 'Automated Hate Speech Detection and the"
    " Problem of Offensive Language', ICWSM 2017: tweets found through the Hatebase lexicon",
)
TOXIGEN = Labelled(
    name="toxigen",
    repo="microsoft/TOXIGEN",
    commit="01517e814639e0334c920a3c502036c8158aac87",
    paths=("prompts/hate_*_1k.txt", "prompts/neutral_*_1k.txt"),
    licence_path="LICENSE.txt",
    licence="MIT (code) and Community Data License Agreement - Permissive 2.0 (data), both in"
    " the repository's LICENSE.txt, Copyright (c) Microsoft Corporation",
    sha256="eb64f354e6006357ff11d2dae1a32d32127e4c8f6234bbed5db84caac35a232f",
    licence_sha256="56f1dd6be56e0afd33c2c070fa73448fb0eddcbcd60a55a53a8a26a0f6b4c205",
    rows=609,
    columns=("text", "label", "groups"),
    description="The human-written statements inside ToxiGen's demonstration prompts: implicitly"
    " hateful (hate) or neutral / supportive (neutral) statements about 13 minority groups; each"
    " prompt line joins about six with a literal '\\n-', so they are split apart and"
    " de-duplicated (the same statements recur in hundreds of prompts)",
    provenance="Hartvigsen et al., 'ToxiGen: A Large-Scale Machine-Generated Dataset for"
    " Adversarial and Implicit Hate Speech Detection', ACL 2022: the human-curated seed"
    " statements, not the machine-generated sentences",
)
ETHOS = Labelled(
    name="ethos",
    repo="intelligence-csd-auth-gr/Ethos-Hate-Speech-Dataset",
    commit="705258e118ce9611ebbd5ab2a4841b0066547293",
    paths=(
        "ethos/ethos_data/Ethos_Dataset_Binary.csv",
        "ethos/ethos_data/Ethos_Dataset_Multi_Label.csv",
    ),
    licence_path="LICENSE",
    licence="GPL-3.0 (repository LICENSE and README)",
    sha256="4cc16945cc0b7bb504e89e3428a003aa061f359cabef64c3e1313fa6c943f371",
    licence_sha256="3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    rows=997,
    columns=("text", "is_hate", "violence"),
    description="YouTube and Reddit comments with the share of annotators who judged them hate"
    " speech (is_hate), and for the hateful ones the share who judged that they incite violence"
    " (violence; empty for comments outside the multi-label set); de-duplicated",
    provenance="Mollas, Chrysopoulou, Karlos and Tsoumakas, 'ETHOS: a multi-label hate speech"
    " detection dataset', Complex & Intelligent Systems 2022 (Figure Eight annotators)",
)

OPENAI_MODERATION = Labelled(
    name="openai_moderation",
    repo="openai/moderation-api-release",
    commit="f4ab51b5edd3bfbcb349a56324274235b674e0e4",
    paths=("data/samples-1680.jsonl.gz",),
    licence_path="LICENSE",
    licence="MIT (repository LICENSE, Copyright (c) 2022 OpenAI)",
    sha256="64a987d512a272195e7cf1794a4b39ad8591ce3796e888b9b7fb20df46488112",
    licence_sha256="b5d65a59060e68c4ff940e1eddfa6f94b2d68fdf58ed7f4dd57721c997e35e9d",
    rows=1_582,
    columns=("text", "positive", "known"),
    description="The evaluation set of 'A Holistic Approach to Undesired Content Detection':"
    " texts with binary labels for sexual (S), hate (H), violence (V), harassment (HR),"
    " self-harm (SH), hate/threatening (H2) and violence/graphic (V2), each label known for"
    " part of the set (positive: the labels that are 1; known: those rated); the 85 texts"
    " labelled sexual/minors (S3) are left out; whitespace collapsed, de-duplicated",
    provenance="Markov et al. (OpenAI), AAAI 2023: a published test set, so it is used as"
    " one (test split only)",
)

STORMFRONT = Labelled(
    name="stormfront",
    repo="Vicomtech/hate-speech-dataset",
    commit="b802137e8314c38a8d4faa965f9908d6c8e7a84d",
    paths=("annotations_metadata.csv", "all_files/*.txt"),
    licence_path="LICENSE",
    licence="CC BY-SA 3.0 ES (repository LICENSE and README)",
    sha256="4ca1685ef476255f1f357cbccfa8383f36267dfcc5dc269cdeda8a97754a50eb",
    licence_sha256="4d4d0674cda88cf00506c04f99ded5d9db7b98d51f71955ffaf39cece6453461",
    rows=10_506,
    columns=("text", "label", "num_contexts"),
    description="Sentences of posts on a white-supremacist forum, each labelled hate or noHate"
    " by the authors' annotators (with how many neighbouring sentences they needed to decide);"
    " sentences labelled 'relation' (hate only together with another) or 'idk/skip' are left"
    " out; whitespace collapsed, de-duplicated",
    provenance="de Gibert, Perez, García-Pablos and Cuadros, 'Hate Speech Dataset from a White"
    " Supremacy Forum', 2nd Workshop on Abusive Language Online (ALW2), 2018",
)

HATEMOJI = Labelled(
    name="hatemoji",
    repo="HannahKirk/Hatemoji",
    commit="a626f63216158748d072e581efc00267031f4404",
    paths=(
        "HatemojiBuild/train.csv",
        "HatemojiBuild/validation.csv",
        "HatemojiBuild/test.csv",
    ),
    licence_path="LICENSE",
    licence="CC-BY-4.0 (repository LICENSE)",
    sha256="0bc27e0b0bcdd73814d746d2c9f5a114cd31e8712ca174b9b56ad191e997df3e",
    licence_sha256="9ba9550ad48438d0836ddab3da480b3b69ffa0aac7b7878b5a0039e7ab429411",
    rows=5_878,
    columns=("text", "label", "type", "target", "pair", "set"),
    description="HatemojiBuild: adversarial, human-written hateful and not-hateful posts, most"
    " written with emoji, each original matched with a perturbation that flips its label by"
    " changing the stance or the target (pair: the smallest entry id of a post's chain of"
    " matches, so an original and its perturbations share it); type: derogation, animosity,"
    " dehumanizing or threatening language, or none; whitespace collapsed, de-duplicated (a"
    " text given both labels is dropped)",
    provenance="Kirk, Vidgen, Röttger, Thrush and Hale, 'Hatemoji: A Test Suite and"
    " Adversarially-Generated Dataset for Benchmarking and Detecting Emoji-Based Hate',"
    " NAACL 2022 (three rounds of annotators writing to fool a model in the loop)",
)
HATEXPLAIN = Labelled(
    name="hatexplain",
    repo="TharinduDR/GeneralOffense",
    commit="ce61484227a11b94917aecb71110afd048169fbc",
    paths=(
        "data/HateXplain/original_data/hatexplain_train.csv",
        "data/HateXplain/original_data/hatexplain_test.csv",
    ),
    licence_path="LICENSE",
    licence_repo=("hate-alert/HateXplain", "01d742279dac941981f53806154481c0e15ee686"),
    licence="MIT (upstream hate-alert/HateXplain LICENSE, Copyright (c) 2020 Punyajoy Saha;"
    " the copy's repository states no licence of its own); the posts are Twitter and Gab"
    " users' own",
    sha256="91c6a8c688a6138f3ee634f7fe1f1cc1263ba94674772964d80f5536549978ca",
    licence_sha256="56fc351d0e8ebf939208f88cdb27e00833148b957b347a069f38ee88e5fc8db6",
    rows=15_331,
    columns=("text", "label"),
    description="Twitter and Gab posts with the majority label of three annotators:"
    " hatespeech, offensive or normal, as word tokens (lower-cased, users as <user>); the"
    " tokens are joined with spaces and the <user>, <url> and <number> placeholders dropped;"
    " de-duplicated (a text given two labels is dropped). Read from a copy, as upstream's"
    " dataset.json is absent from its snapshot: the copy's 11,535 + 3,844 posts (4,732 / 4,386"
    " / 6,261 hatespeech / offensive / normal together) are upstream's train division (15,383"
    " posts in post_id_divisions.json), re-split; upstream's own validation and test posts are"
    " not in it",
    provenance="Mathew, Saha, Yimam, Biemann, Goyal and Mukherjee, 'HateXplain: A Benchmark"
    " Dataset for Explainable Hate Speech Detection', AAAI 2021 (hate-alert/HateXplain),"
    " through the copy in TharinduDR/GeneralOffense",
)
SBIC = Labelled(
    name="sbic",
    repo="Master-Project-Hate-Speech/STITCHeD",
    commit="d6649f167e52a4aa116427dfa7fc27fe627bf415",
    paths=("data/SBFv2.dev.csv",),
    licence_path="LICENSE",
    licence="CC-BY-4.0 (the Social Bias Frames dataset card); the copy's repository is"
    " Apache-2.0 (its LICENSE, kept beside the TSV); the posts are their authors' own",
    sha256="613d82e2e565a2da554b2f84e58cac0301cdcb6bce0816e20f072530473fb6d2",
    licence_sha256="c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
    rows=4_673,
    columns=("text", "offensive", "group", "targets", "annotators"),
    description="The development split of the Social Bias Frames corpus: Reddit, Twitter and"
    " hate-site posts, each rated by about three annotators; per post, the share who called it"
    " offensive, the share who said it targets a group (of those who called it offensive), and"
    " the groups they named; whitespace collapsed, de-duplicated",
    provenance="Sap, Gabriel, Qin, Jurafsky, Smith and Choi, 'Social Bias Frames: Reasoning"
    " about Social and Power Implications of Language', ACL 2020, through the copy in"
    " Master-Project-Hate-Speech/STITCHeD (its dev file; the train and test files are absent"
    " from the snapshot)",
)

SOURCES: dict[str, Labelled] = {
    s.name: s
    for s in (DAVIDSON, TOXIGEN, ETHOS, OPENAI_MODERATION, STORMFRONT, HATEMOJI, HATEXPLAIN, SBIC)
}


# ---------------------------------------------------------------------------------------------
# Where the files are


def data_dir() -> Path:
    """The folder holding one sub-folder per source.

    `$MODELS_LABELLED_DATA` if set; else `models/data/labelled/` if the repository has it; else
    `shared/data/labelled/` in the nearest folder above the repository that has one (data kept
    beside the checkout rather than in it). The repository's path is returned
    when none exists, so the error names a place to put the files.
    """
    env = os.environ.get(DATA_ENV)
    if env:
        return Path(env)
    in_repo = REPO_ROOT / "models" / "data" / DIRNAME
    if in_repo.is_dir():
        return in_repo
    for parent in REPO_ROOT.parents:
        shared = parent / "shared" / "data" / DIRNAME
        if shared.is_dir():
            return shared
    return in_repo


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_rows(source: Labelled, directory: Path | None = None) -> list[dict[str, str]]:
    """The rows of a source's TSV, after checking it and its licence file against the pins."""
    folder = (directory or data_dir()) / source.name
    tsv, licence = folder / source.tsv, folder / LICENCE_FILE
    for path in (tsv, licence):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: the labelled data ({', '.join(SOURCES)}) are not in a"
                f" package registry; see models/DATA.md for where they come from and"
                f" `python -m models.sources.labelled prepare` to make them (or set ${DATA_ENV})"
            )
    for path, pinned in ((tsv, source.sha256), (licence, source.licence_sha256)):
        actual = _sha256(path.read_bytes())
        if pinned and actual != pinned:
            raise ValueError(f"{path}: sha256 {actual}, expected {pinned}")
    return parse_tsv(tsv.read_text(encoding="utf-8"), source.columns)


def parse_tsv(text: str, columns: Sequence[str]) -> list[dict[str, str]]:
    """Rows of a TSV written by `write_tsv`; its header must be `columns`."""
    rows = list(
        csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None)
    )
    if not rows or tuple(rows[0]) != tuple(columns):
        raise ValueError(f"expected the header {list(columns)}, got {rows[:1]}")
    return [dict(zip(columns, row, strict=True)) for row in rows[1:] if row]


def write_tsv(rows: Iterable[Sequence[str]], columns: Sequence[str]) -> str:
    """A TSV (header first); texts never hold tabs or line breaks once cleaned."""
    out = io.StringIO()
    writer = csv.writer(
        out, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, lineterminator="\n"
    )
    writer.writerow(columns)
    for row in rows:
        if any(("\t" in cell or "\n" in cell) for cell in row):
            raise ValueError(f"a cell holds a tab or a line break: {row!r}")
        writer.writerow(row)
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# Loaders: plain Python data, in file order


def davidson(directory: Path | None = None) -> list[tuple[str, str, float, float]]:
    """(tweet, hate / offensive / neither, share of hate votes, share of offensive votes)."""
    out = []
    for row in read_rows(DAVIDSON, directory):
        count = int(row["count"])
        out.append(
            (row["text"], row["label"], int(row["hate"]) / count, int(row["offensive"]) / count)
        )
    return out


def toxigen(directory: Path | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(statement, hate / neutral, the groups whose prompt files hold it)."""
    return [
        (row["text"], row["label"], tuple(row["groups"].split(",")))
        for row in read_rows(TOXIGEN, directory)
    ]


def openai_moderation(
    directory: Path | None = None,
) -> list[tuple[str, frozenset[str], frozenset[str]]]:
    """(text, the category labels that are 1, the category labels that were rated)."""

    def labels(cell: str) -> frozenset[str]:
        return frozenset(cell.split(",")) if cell else frozenset()

    return [
        (row["text"], labels(row["positive"]), labels(row["known"]))
        for row in read_rows(OPENAI_MODERATION, directory)
    ]


def stormfront(directory: Path | None = None) -> list[tuple[str, str, int]]:
    """(sentence, hate / noHate, how many other sentences the annotator needed)."""
    return [
        (row["text"], row["label"], int(row["num_contexts"]))
        for row in read_rows(STORMFRONT, directory)
    ]


def ethos(directory: Path | None = None) -> list[tuple[str, float, float | None]]:
    """(comment, share judging it hate speech, share judging it incites violence or None)."""
    return [
        (row["text"], float(row["is_hate"]), float(row["violence"]) if row["violence"] else None)
        for row in read_rows(ETHOS, directory)
    ]


def hatemoji(directory: Path | None = None) -> list[tuple[str, str, str, str, str]]:
    """(post, hate / not_hate, type of hate or none, targets, pair name)."""
    return [
        (row["text"], row["label"], row["type"], row["target"], row["pair"])
        for row in read_rows(HATEMOJI, directory)
    ]


def hatexplain(directory: Path | None = None) -> list[tuple[str, str]]:
    """(post, hatespeech / offensive / normal)."""
    return [(row["text"], row["label"]) for row in read_rows(HATEXPLAIN, directory)]


def sbic(directory: Path | None = None) -> list[tuple[str, float | None, float | None, str]]:
    """(post, share calling it offensive, share saying it targets a group, groups named)."""

    def share(cell: str) -> float | None:
        return float(cell) if cell else None

    return [
        (row["text"], share(row["offensive"]), share(row["group"]), row["targets"])
        for row in read_rows(SBIC, directory)
    ]


# ---------------------------------------------------------------------------------------------
# Cleaning (run once on a repository snapshot by `prepare`)

_SPACE = re.compile(r"\s+")
_RETWEET = re.compile(r"\bRT\s+@\w+:?")
_MENTION = re.compile(r"@\w+:?")
_URL = re.compile(r"https?://\S+|\bwww\.\S+")
_LEADING_JUNK = re.compile(r"^[\s:\"!]+(?=\S)")


def collapse(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _key(text: str) -> str:
    return normalize_text(text).lower()


def clean_tweet(text: str) -> str:
    """A Davidson tweet as a chat line: entities unescaped (some twice), `RT @user:` prefixes,
    @mentions and URLs removed, the '!!!' or ':' the prefixes leave at the start and an
    unpaired closing quote (an artefact of the CSV export) dropped."""
    for _ in range(3):
        unescaped = html.unescape(text)
        if unescaped == text:
            break
        text = unescaped
    text = _URL.sub(" ", _MENTION.sub(" ", _RETWEET.sub(" ", text)))
    text = _LEADING_JUNK.sub("", collapse(text)).strip()
    if text.endswith('"') and text.count('"') % 2:  # the export's stray closing quote
        text = text[:-1].rstrip()
    return text


def prepare_davidson(show: Show) -> list[list[str]]:
    """Rows of davidson.tsv from the repository's labeled_data.csv."""
    data = show(DAVIDSON.paths[0]).decode("utf-8")
    names = {0: "hate", 1: "offensive", 2: "neither"}
    seen: set[str] = set()
    out = []
    for row in csv.DictReader(io.StringIO(data)):
        text = clean_tweet(row["tweet"])
        key = _key(text)
        if len(key) < 3 or key in seen:
            continue
        seen.add(key)
        votes = [row[k] for k in ("count", "hate_speech", "offensive_language", "neither")]
        out.append([text, names[int(row["class"])], *votes])
    return out


# Statements inside a prompt line: joined by a literal "\n-", or (in the community-added files)
# by "- " right after the end of the previous sentence.
_STATEMENT_SPLIT = re.compile(r"\\n-|(?<=[.!?)\"'])\s?-\s+(?=\w)")


def split_prompt(line: str) -> list[str]:
    """The statements of one ToxiGen prompt line, stripped of their list dashes."""
    parts = (part.strip().lstrip("-").strip().rstrip("\\").strip() for part in line.split("\n"))
    return [
        collapse(s.strip().lstrip("-").strip().rstrip("\\"))
        for part in parts
        for s in _STATEMENT_SPLIT.split(part)
        if s.strip().lstrip("-").strip()
    ]


def prepare_toxigen(show: Show, files: Sequence[str]) -> list[list[str]]:
    """Rows of toxigen.tsv from the prompt files (`files`: their paths, hate and neutral).

    A statement found under both labels would be dropped (none is, at the pinned commit).
    """
    label_of: dict[str, str] = {}
    text_of: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    conflicted: set[str] = set()
    pattern = re.compile(r"prompts/(hate|neutral)_(\w+?)_1k\.txt")
    for path in sorted(files):
        match = pattern.fullmatch(path)
        if match is None:
            raise ValueError(f"not a ToxiGen prompt file: {path}")
        label, group = match.groups()
        for line in show(path).decode("utf-8").splitlines():
            for statement in split_prompt(line):
                key = _key(statement)
                if len(key) < 3:
                    continue
                if key in label_of and label_of[key] != label:
                    conflicted.add(key)
                label_of.setdefault(key, label)
                text_of.setdefault(key, statement)
                if group not in groups.setdefault(key, []):
                    groups[key].append(group)
    return [[text_of[k], label_of[k], ",".join(groups[k])] for k in label_of if k not in conflicted]


def prepare_ethos(show: Show) -> list[list[str]]:
    """Rows of ethos.tsv: the binary set, each comment with its violence share if rated."""

    def rows(path: str) -> list[dict[str, str]]:
        text = show(path).decode("utf-8-sig")
        return list(csv.DictReader(io.StringIO(text), delimiter=";"))

    binary, multi = (rows(p) for p in ETHOS.paths)
    violence = {_key(collapse(r["comment"])): r["violence"] for r in multi}
    seen: set[str] = set()
    out = []
    for row in binary:
        text = collapse(row["comment"])
        key = _key(text)
        if len(key) < 3 or key in seen:
            continue
        seen.add(key)
        v = violence.get(key)
        out.append([text, f"{float(row['isHate']):.4g}", f"{float(v):.4g}" if v else ""])
    return out


_OPENAI_LABELS = ("S", "H", "V", "HR", "SH", "S3", "H2", "V2")


def prepare_openai_moderation(show: Show) -> list[list[str]]:
    """Rows of openai_moderation.tsv from the gzipped JSON lines; sexual/minors texts dropped."""
    data = gzip.decompress(show(OPENAI_MODERATION.paths[0])).decode("utf-8")
    seen: set[str] = set()
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("S3") == 1:
            continue
        text = collapse(str(record["prompt"]))
        key = _key(text)
        if len(key) < 3 or key in seen:
            continue
        seen.add(key)
        positive = [k for k in _OPENAI_LABELS if record.get(k) == 1]
        known = [k for k in _OPENAI_LABELS if k in record]
        out.append([text, ",".join(positive), ",".join(known)])
    return out


def prepare_stormfront(show: Show) -> list[list[str]]:
    """Rows of stormfront.tsv: every hate or noHate sentence, in the annotation file's order."""
    meta = csv.DictReader(io.StringIO(show(STORMFRONT.paths[0]).decode("utf-8")))
    seen: set[str] = set()
    out = []
    for row in meta:
        if row["label"] not in ("hate", "noHate"):
            continue
        text = collapse(show(f"all_files/{row['file_id']}.txt").decode("utf-8", "replace"))
        key = _key(text)
        if len(key) < 3 or key in seen:
            continue
        seen.add(key)
        out.append([text, row["label"], row["num_contexts"]])
    return out


def _pairs(rows: Sequence[dict[str, str]]) -> dict[str, str]:
    """Entry id -> the smallest entry id of its chain of matches (`matched_id`), so an original
    and every perturbation of it share one pair name (a union-find over the matches)."""
    parent = {row["entry_id"]: row["entry_id"] for row in rows}

    def root(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for row in rows:
        match = row["matched_id"]
        if match in parent:
            a, b = sorted((root(row["entry_id"]), root(match)), key=int)
            parent[b] = a
    return {entry: root(entry) for entry in parent}


def without_conflicts(rows: list[list[str]], label_at: int = 1) -> list[list[str]]:
    """Rows de-duplicated by normalised text (first kept); a text with two labels is dropped."""
    labels: dict[str, set[str]] = {}
    for row in rows:
        labels.setdefault(_key(row[0]), set()).add(row[label_at])
    seen: set[str] = set()
    out = []
    for row in rows:
        key = _key(row[0])
        if len(key) < 3 or key in seen or len(labels[key]) > 1:
            continue
        seen.add(key)
        out.append(row)
    return out


def prepare_hatemoji(show: Show) -> list[list[str]]:
    """Rows of hatemoji.tsv from HatemojiBuild's three files, pairs named across them."""
    rows = [
        row
        for path in HATEMOJI.paths
        for row in csv.DictReader(io.StringIO(show(path).decode("utf-8")))
    ]
    pair = _pairs(rows)
    out = []
    for row in rows:
        label = "hate" if row["label_gold"] == "1" else "not_hate"
        target = ",".join(t.strip(" '") for t in row["target"].strip("[]").split(","))
        out.append(
            [collapse(row["text"]), label, row["type"], target, pair[row["entry_id"]], row["set"]]
        )
    return without_conflicts(out)


_PLACEHOLDER = re.compile(r"<(?:user|url|number)>")


def prepare_hatexplain(show: Show) -> list[list[str]]:
    """Rows of hatexplain.tsv: the copy's train and test posts, tokens joined back to text."""
    out = []
    for path in HATEXPLAIN.paths:
        for row in csv.DictReader(io.StringIO(show(path).decode("utf-8"))):
            text = collapse(_PLACEHOLDER.sub(" ", " ".join(_tokens(row["post_tokens"]))))
            out.append([text, row["post_label"]])
    return without_conflicts(out)


def _tokens(cell: str) -> list[str]:
    """A Python list literal of strings, as the copy's CSV writes them."""
    import ast

    value = ast.literal_eval(cell)
    if not isinstance(value, list):
        raise ValueError(f"not a token list: {cell[:60]!r}")
    return [str(v) for v in value]


def prepare_sbic(show: Show) -> list[list[str]]:
    """Rows of sbic.tsv: one per post, the annotators' answers averaged."""
    posts: dict[str, list[dict[str, str]]] = {}
    for row in csv.DictReader(io.StringIO(show(SBIC.paths[0]).decode("utf-8"))):
        posts.setdefault(collapse(row["post"]), []).append(row)
    out = []
    for text, rows in posts.items():
        offensive = [float(r["offensiveYN"]) for r in rows if r["offensiveYN"]]
        group = [float(r["whoTarget"]) for r in rows if r["whoTarget"]]
        targets = sorted({r["targetMinority"].strip() for r in rows if r["targetMinority"]})
        out.append(
            [
                text,
                f"{sum(offensive) / len(offensive):.4g}" if offensive else "",
                f"{sum(group) / len(group):.4g}" if group else "",
                ";".join(t.replace("\t", " ") for t in targets),
                str(len(rows)),
            ]
        )
    return without_conflicts(out, label_at=1)


def _git_tree(git_dir: Path, commit: str, folder: str) -> Show:
    """Every file under `folder` at `commit`, read at once (`git archive`): thousands of small
    files would otherwise cost a process each."""
    import tarfile

    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "--format=tar", commit, folder],
        capture_output=True,
        check=True,
    )
    files: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        for member in tar.getmembers():
            extracted = tar.extractfile(member) if member.isfile() else None
            if extracted is not None:
                files[member.name] = extracted.read()
    single = git_show(git_dir, commit)
    return lambda path: files[path] if path in files else single(path)


def git_show(git_dir: Path, commit: str) -> Show:
    def show(path: str) -> bytes:
        done = subprocess.run(
            ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
            capture_output=True,
            check=True,
        )
        return done.stdout

    return show


def _git_files(git_dir: Path, commit: str, patterns: Sequence[str]) -> list[str]:
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit],
        capture_output=True,
        check=True,
        text=True,
    )
    import fnmatch

    return [p for p in done.stdout.splitlines() if any(fnmatch.fnmatch(p, g) for g in patterns)]


def prepare(name: str, git_dir: Path, out: Path, licence_dir: Path | None = None) -> Path:
    """Write `<out>/<name>/<name>.tsv` and its LICENSE from a snapshot's git directory (the
    licence from `licence_dir`, the snapshot of `licence_repo`, for a source that has one)."""
    source = SOURCES[name]
    show = git_show(git_dir, source.commit)
    licence = show
    if source.licence_repo is not None:
        if licence_dir is None:
            raise ValueError(f"{name}: its licence is in {source.licence_repo[0]}: NAME=DIR,DIR")
        licence = git_show(licence_dir, source.licence_repo[1])
    if name == "davidson":
        rows = prepare_davidson(show)
    elif name == "toxigen":
        rows = prepare_toxigen(show, _git_files(git_dir, source.commit, source.paths))
    elif name == "ethos":
        rows = prepare_ethos(show)
    elif name == "stormfront":
        rows = prepare_stormfront(_git_tree(git_dir, source.commit, "all_files"))
    elif name == "hatemoji":
        rows = prepare_hatemoji(show)
    elif name == "hatexplain":
        rows = prepare_hatexplain(show)
    elif name == "sbic":
        rows = prepare_sbic(show)
    else:
        rows = prepare_openai_moderation(show)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source.tsv).write_text(write_tsv(rows, source.columns), encoding="utf-8")
    (folder / LICENCE_FILE).write_bytes(licence(source.licence_path))
    return folder


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m models.sources.labelled", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="clean the datasets out of repository snapshots")
    prep.add_argument(
        "snapshots",
        nargs="+",
        help="NAME=GIT_DIR (NAME=GIT_DIR,LICENCE_GIT_DIR for hatexplain), NAME among "
        + ", ".join(SOURCES),
    )
    prep.add_argument("--out", type=Path, default=None, help="default: data_dir()")
    args = parser.parse_args(argv)
    out = args.out or data_dir()
    for item in args.snapshots:
        name, _, dirs = item.partition("=")
        git_dir, _, licence_dir = dirs.partition(",")
        folder = prepare(name, Path(git_dir), out, Path(licence_dir) if licence_dir else None)
        for path in sorted(folder.iterdir()):
            print(f"{path}  {_sha256(path.read_bytes())}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
