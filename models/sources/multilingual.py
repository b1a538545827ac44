"""Labelled non-English abuse data (issue 40, item 3): the e5 recipe's only real training text
outside English.

Pinned, prepared and read exactly as `models.sources.labelled` does (a cleaned TSV beside the
repository's own licence, both checked against sha256s here), because these are the same kind
of material: research data in no registry, read once from a snapshot at a pinned commit. They
live apart from `labelled.SOURCES` for one reason: the MiniLM recipe must never see them (its
tokenizer is English, so Chinese or Arabic would reach it as unknown pieces), and everything that
reads `labelled.SOURCES` (the English splits, the tuner's dev pools) must stay as it was.

Every TSV has the columns `text`, `language` (ISO 639-1), `label` (the source's own label,
unchanged), `detail` (a finer label where the source has one) and `pair` (a source's own group
of contrastive rewrites, which must share a split). `MAPPING` turns a source's label into our
family and targets; its rules are in each source's description. Lines that overlap Multilingual
HateCheck, the public suite the per-language validation is judged on, are listed by id in
`multilingual_overlap.tsv` (found once from the suite's snapshot: `overlap` below) and never read.

The TSVs and the overlap list are written by `models.lines.multilingual_prepare`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from models.sources import labelled
from models.sources.labelled import Labelled
from models.sources.lineids import SUITE_OVERLAP_COLUMNS, line_id

COLUMNS = ("text", "language", "label", "detail", "pair")
SPLITS = ("train", "dev", "test")  # realdata.SPLITS, which imports this module
OVERLAP_FILE = "multilingual_overlap.tsv"  # (source, id, suite): lines never read

COLD = Labelled(
    name="cold",
    repo="thu-coai/COLDataset",
    commit="a0c55a945497ab58e94aef491180e1cf88ffb864",
    paths=("COLDataset/train.csv", "COLDataset/dev.csv", "COLDataset/test.csv"),
    licence_path="LICENSE",
    licence="Apache-2.0 (repository LICENSE)",
    sha256="629e1c09217b83c265cdb47ba4feadb6000d0c6c3553b75b9ee3d15b43122836",
    licence_sha256="c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
    rows=26_380,
    columns=COLUMNS,
    description="Chinese (zh) Zhihu and Weibo comments on race, gender and region, labelled"
    " offensive or safe; the test file also says how (attack on an individual, on a group,"
    " anti-bias, other); comments over 60 characters left out (chat lines are short)."
    " Ours: offensive -> hate (`identity_attack` and `toxicity` 1: every"
    " topic is an identity group), but an attack on an individual -> insult (`insult`,"
    " `toxicity`); safe and anti-bias (counter-speech) -> benign. Whitespace collapsed,"
    " de-duplicated, a text given two labels dropped",
    provenance="Deng, Zhou, Sun, Mi and Huang, 'COLD: A Benchmark for Chinese Offensive Language"
    " Detection', EMNLP 2022",
)
GERMEVAL = Labelled(
    name="germeval",
    repo="uds-lsv/GermEval-2018-Data",
    commit="9877472d39523effd54cd079b4c61157ed141508",
    paths=("germeval2018.training.txt", "germeval2018.test.txt"),
    licence_path="LICENSE.md/LICENSE.md",
    licence="CC BY 4.0 (repository LICENSE.md/LICENSE.md)",
    sha256="de5cd3a4978649b75009221df948f45b28186281453b0e30ff744fc1868d9120",
    licence_sha256="2a82ac9bbc3e3ee066908381e8d373896db5a6025d083fbd59692fe9ccfb9111",
    rows=8_539,
    columns=COLUMNS,
    description="German (de) tweets, OFFENSE or OTHER, the offensive ones as ABUSE, INSULT or"
    " PROFANITY. Ours: INSULT -> insult (`insult`, `toxicity` 1); ABUSE -> abuse (`toxicity`"
    " 1: no label says whether a group is its target); PROFANITY -> `obscene` 1 only, not"
    " hostile (swearing at nobody); OTHER -> benign. |LBR| markers, @mentions and URLs"
    " removed, de-duplicated, a text given two labels dropped",
    provenance="Wiegand, Siegel and Ruppenhofer, 'Overview of the GermEval 2018 Shared Task on"
    " the Identification of Offensive Language', KONVENS 2018",
)
TRAC = Labelled(
    name="trac",
    repo="kmi-linguistics/trac-1",
    commit="cc0ec40468e2bbe9549c30ee8d016424479cd9bf",
    paths=("hindi/agr_hi_train.csv", "hindi/agr_hi_dev.csv"),
    licence_path="LICENSE",
    licence="Apache-2.0 (repository LICENSE)",
    sha256="f8f0e57545ba418b355c3e2c0c0689e7044783d67ee8507f9e3a2e19e28bde20",
    licence_sha256="c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4",
    rows=8_596,
    columns=COLUMNS,
    description="Hindi (hi) Facebook comments, most in Latin script as chat writes it, labelled"
    " overtly (OAG), covertly (CAG) or not aggressive (NAG). Ours: OAG -> aggression"
    " (`toxicity` 1, `insult` 0.7: aggression is hostile, not always an insult); NAG ->"
    " benign; CAG left out (mostly political sarcasm a reader would not call hostile)."
    " @mentions and URLs removed, de-duplicated, a text given two labels dropped. The shared"
    " task's test file is not in the repository",
    provenance="The shared task on aggression identification of TRAC-1 at COLING 2018"
    " (Kumar, Ojha, Malmasi and Zampieri, 'Benchmarking Aggression Identification in Social"
    " Media'); the corpus: Kumar, Reganti, Bhatia and Maheshwari, LREC 2018",
)
MLMA = Labelled(
    name="mlma",
    repo="HKUST-KnowComp/MLMA_hate_speech",
    commit="479836984aebfbd8a0270ca92018980f745e4c44",
    paths=("hate_speech_mlma.zip",),
    licence_path="LICENSE",
    licence="MIT (repository LICENSE, Copyright (c) 2019 HKUST-KnowComp)",
    sha256="e4a79748b98f46cc98e84ffb05b5e97a8b26e8d748b6f1456504f905b1b0f761",
    licence_sha256="1b606ff3629d98e8c6ce1217016293e4deb19f5cfabfeeba246e2a7aa12ea10e",
    rows=7_157,
    columns=COLUMNS,
    description="Arabic (ar) and French (fr) tweets found by hate keywords, each with the"
    " annotators' tones (`label`: normal, offensive, abusive, disrespectful, hateful,"
    " fearful, joined by '_') and `detail` target;group. Ours: any hateful -> hate"
    " (`identity_attack`, `toxicity` 1); offensive, abusive or disrespectful -> offensive"
    " (`toxicity` 1, `insult` 1 when the group is an individual); normal alone -> benign;"
    " normal mixed with another tone (the annotators disagreed) and fearful alone are left"
    " out. The authors warn that some annotations are unreliable. @user/@url placeholders"
    " removed, de-duplicated, a text given two labels dropped",
    provenance="Ousidhoum, Lin, Zhang, Song and Yeung, 'Multilingual and Multi-Aspect Hate"
    " Speech Analysis', EMNLP 2019 (the English file is not used)",
)
GAHD = Labelled(
    name="gahd",
    repo="jagol/gahd",
    commit="2a4e919d5208d99a885824c63583d898d02ca1a1",
    paths=("gahd_disaggregated.csv",),
    licence_path="LICENSE",
    licence="CC BY 4.0 (repository LICENSE)",
    sha256="ac846416e550c8e29af521382b07b748f53fa51b902ae95c20fa37c12b164c74",
    licence_sha256="9e5f1b3c610b9c2da5c313bf81d577a7d1acec686bdb0384edefa6df0f90cd94",
    rows=6_998,
    columns=COLUMNS,
    description="German (de) adversarial hate speech: sentences annotators wrote to fool a"
    " model, German news sentences, and contrastive rewrites that flip the label (`pair`: a"
    " sentence and its rewrites share one, and one split). Ours: hate -> hate"
    " (`identity_attack`, `toxicity` 1), not hate -> benign (hard negatives). The rows"
    " translated from Vidgen et al.'s Dynabench set (source `translation`) are left out:"
    " that set states no licence. Whitespace collapsed, de-duplicated, a text given two"
    " labels dropped",
    provenance="Goldzycher, Röttger and Schneider, 'Improving Adversarial Data Collection by"
    " Supporting Annotators: Lessons from GAHD, a German Hate Speech Dataset', NAACL 2024",
)
SOURCES: dict[str, Labelled] = {s.name: s for s in (COLD, GERMEVAL, TRAC, MLMA, GAHD)}

HATE = {"identity_attack": 1.0, "toxicity": 1.0}
INSULT = {"insult": 1.0, "toxicity": 1.0}
# (source, label) -> (family, targets in our labels); the family "benign" is not hostile.
MAPPING: dict[tuple[str, str], tuple[str, dict[str, float]]] = {
    ("cold", "offensive"): ("hate", HATE),
    ("cold", "attack_individual"): ("insult", INSULT),
    ("cold", "anti_bias"): ("counter", {}),
    ("cold", "safe"): ("benign", {}),
    ("germeval", "INSULT"): ("insult", INSULT),
    ("germeval", "ABUSE"): ("abuse", {"toxicity": 1.0}),
    ("germeval", "PROFANITY"): ("profanity", {"obscene": 1.0}),
    ("germeval", "OTHER"): ("benign", {}),
    ("trac", "OAG"): ("aggression", {"toxicity": 1.0, "insult": 0.7}),
    ("trac", "NAG"): ("benign", {}),
    ("gahd", "hate"): ("hate", HATE),
    ("gahd", "not_hate"): ("benign", {}),
}
NOT_HOSTILE = frozenset({"benign", "counter", "profanity"})
_MLMA_RUDE = frozenset({"offensive", "abusive", "disrespectful"})


class Row(NamedTuple):
    """One line as the build reads it: `source` is the dataset and language (`cold_zh`)."""

    source: str
    dataset: str  # the `SOURCES` name
    text: str
    language: str
    family: str
    hostile: bool
    target: dict[str, float]
    split_key: str  # what the split is hashed from: the text, or a contrastive pair's name


def family_of(name: str, label: str, detail: str) -> tuple[str, dict[str, float]] | None:
    """Our family and targets for a source's label (`MAPPING`), or None: left out."""
    if name == "cold" and detail in ("attack_individual", "anti_bias"):
        return MAPPING[(name, detail)]
    if name != "mlma":
        return MAPPING.get((name, label))
    tones = set(label.split("_"))
    if "normal" in tones:
        return ("benign", {}) if tones == {"normal"} else None
    if "hateful" in tones:
        return "hate", HATE
    if tones & _MLMA_RUDE:
        return "offensive", INSULT if detail.endswith(";individual") else {"toxicity": 1.0}
    return None


def overlapping(directory: Path | None = None) -> set[tuple[str, str]]:
    """(dataset, line id) of every line listed in `OVERLAP_FILE`."""
    path = (directory or labelled.data_dir()) / OVERLAP_FILE
    rows = labelled.parse_tsv(path.read_text(encoding="utf-8"), SUITE_OVERLAP_COLUMNS)
    return {(row["source"], row["id"]) for row in rows}


def rows(directory: Path | None = None, *, drop: bool = True) -> list[Row]:
    """Every source's lines with family and targets, in file order; those `MAPPING` leaves out
    and (unless `drop` is False) those overlapping the public suite are not returned."""
    skip = overlapping(directory) if drop else set()
    out = []
    for name, source in SOURCES.items():
        for row in labelled.read_rows(source, directory):
            text = row["text"]
            found = family_of(name, row["label"], row["detail"])
            if found is None or (name, line_id(name, text)) in skip:
                continue
            family, target = found
            key = f"{name} pair {row['pair']}" if row["pair"] else text
            language = row["language"]
            hostile = family not in NOT_HOSTILE
            out.append(
                Row(f"{name}_{language}", name, text, language, family, hostile, target, key)
            )
    return out


def datasheet_section(
    counts: Mapping[tuple[str, str, str], int], trained: Mapping[str, Mapping[str, int]]
) -> list[str]:
    """DATA.md's section on these sources (`models.reports.datasheet`). `counts`: lines per
    (line source such as `cold_zh`, family, split); `trained`: the build's lines and rude ones
    per line source (present only when the build was e5's)."""
    out = [
        "## Non-English labelled data (issue 40): the e5 recipe only",
        "",
        "Five public datasets in six languages, pinned, cleaned and checked like the labelled"
        " research data above (`models/sources/multilingual.py`, prepared by"
        " `python -m models.lines.multilingual_prepare`; each TSV beside its repository's"
        " licence as `LICENSE`). Only `moderator model build --encoder e5` trains on them, on"
        " their train split (the same hash split as every labelled source; a contrastive pair"
        " shares one), with the source's label mapped to ours as gold targets, never distilled"
        " (the teachers read English), hostile lines seen twice. The MiniLM recipe never reads"
        " them (its tokenizer is English). Their dev and test splits are held out for figures"
        " per language and never choose a threshold: the English dev pools that tune the"
        " policy are unchanged. Lines overlapping Multilingual HateCheck (the per-language"
        f" validation) are listed by id in `models/data/labelled/{OVERLAP_FILE}` and never"
        " read: equal, containment or a shared run by words, and for Chinese by characters"
        " (equal letters, or one text inside the other from 7 characters).",
        "",
        "| source | repository @ commit | file read (sha256) | made from | licence | lines"
        " train / dev / test per family | trained on (rude), this build | what | from |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for line_source in sorted({src for src, _, _ in counts}):
        name = line_source.rsplit("_", 1)[0]
        s = SOURCES[name]
        families = sorted({f for src, f, _ in counts if src == line_source})
        per_family = "<br>".join(
            f"{fam}: " + " / ".join(f"{counts[(line_source, fam, sp)]:,}" for sp in SPLITS)
            for fam in families
        )
        c = trained.get(line_source)
        cells = (
            f"`{line_source}`",
            f"`{s.repo}` @ `{s.commit[:7]}`",
            f"`{name}/{s.tsv}` (`{s.sha256[:12]}…`), `{name}/{labelled.LICENCE_FILE}`",
            "<br>".join(f"`{p}`" for p in s.paths),
            s.licence,
            per_family,
            f"{c['lines']:,} ({c['rude']:,})" if c else "0",
            s.description,
            s.provenance,
        )
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return out
