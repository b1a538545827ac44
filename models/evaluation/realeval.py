"""Our model and the teachers side by side on the real test splits and the identity probe.

Every scorer is judged by its own verdict on the same lines: our model (fp32 and int8) by the
default policy's action, a teacher by its published rule (`models.lines.teachers.flagged`). The
figures: benign flagged (and, for our model, blocked) per source, toxic recall per source and
per family, ranking AUC, the insult comments' flag F1, the labelled research data's families
(hateful caught, neutral talk about groups flagged, threats caught) per source and pooled, and
the worst mistakes as text.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from models.evaluation import realtext
from models.lines import identity, realdata
from models.lines.realdata import Line

logger = logging.getLogger(__name__)

Matrix = npt.NDArray[np.float32]
WORST = 20
THREAT_SET_MIN = 200  # issue 27: the held-out threat set it asks for


@dataclass(frozen=True)
class Verdicts:
    """What one scorer said about a list of lines."""

    flagged: npt.NDArray[np.bool_]
    blocked: npt.NDArray[np.bool_] | None  # None: the scorer has no `block`
    toxic_score: npt.NDArray[np.float32]  # for AUC: how toxic it thinks each line is
    insult_score: npt.NDArray[np.float32]  # for the insult comments' AUC
    reason: list[str | None] | None = None
    reviewed: npt.NDArray[np.bool_] | None = None  # None: the scorer has no `review`


Scorer = Callable[[Sequence[str]], Verdicts]


def model_scorer(
    score: Callable[[Sequence[str]], Matrix], labels: Sequence[str], decide: realtext.Decide
) -> Scorer:
    """Our model: the policy's action; the toxic score is the highest label that can act."""
    acting = [j for j, label in enumerate(labels) if label != "obscene"]
    insult = list(labels).index("insult")

    def run(texts: Sequence[str]) -> Verdicts:
        m = score(texts)
        decided = [decide(dict(zip(labels, map(float, row), strict=True))) for row in m]
        acts = np.asarray([v[0] for v in decided])
        return Verdicts(
            flagged=acts != "allow",
            blocked=acts == "block",
            toxic_score=m[:, acting].max(axis=1) if len(m) else np.zeros(0, np.float32),
            insult_score=m[:, insult],
            reason=[v[1] for v in decided],
            reviewed=acts == realtext.REVIEW,
        )

    return run


def teacher_scorer(teacher: Any) -> Scorer:
    """A teacher: flagged by its own rule; its insult score if it has one, else toxicity."""
    from models.lines import teachers

    tox = teachers.OUR_LABELS.index("toxicity")
    ins = teachers.OUR_LABELS.index("insult")

    def run(texts: Sequence[str]) -> Verdicts:
        raw = teacher.score(texts)
        m = teachers.mapped(teacher, raw)
        insult = m[:, ins] if "insult" in teachers.covered(teacher) else m[:, tox]
        return Verdicts(
            flagged=teachers.flagged(teacher, raw),
            blocked=None,
            toxic_score=m[:, tox],
            insult_score=insult,
        )

    return run


def _rates(v: Verdicts, mask: npt.NDArray[np.bool_]) -> dict[str, float]:
    out = {"lines": int(mask.sum()), "flagged": realtext.rate(v.flagged[mask])}
    if v.reviewed is not None:
        out["reviewed"] = realtext.rate(v.reviewed[mask])
    if v.blocked is not None:
        out["blocked"] = realtext.rate(v.blocked[mask])
    return out


def _f1(pred: npt.NDArray[np.bool_], gold: npt.NDArray[np.bool_]) -> float:
    tp = float(np.sum(pred & gold))
    denom = float(np.sum(pred) + np.sum(gold))
    return 2 * tp / denom if denom else 0.0


def judge(lines: Sequence[Line], v: Verdicts) -> dict[str, Any]:
    """All real-text figures of one scorer on the test lines."""
    src = np.asarray([ln.source for ln in lines])
    family = np.asarray([ln.family for ln in lines])
    # The toxic web text and insult comments keep their own figures; the labelled research
    # data are reported by family (`labelled`), so these figures mean what they meant before.
    toxic = np.asarray([ln.toxic for ln in lines]) & np.isin(src, realdata.TOXIC)
    chat_like = np.isin(src, realdata.CHAT_LIKE) & ~toxic
    out: dict[str, Any] = {"benign": {}, "toxic": {}, "family": {}}
    out["benign"]["chat-like"] = _rates(v, chat_like)
    for name in realdata.BENIGN:
        out["benign"][name] = _rates(v, (src == name) & ~toxic)
    out["toxic"]["all"] = _rates(v, toxic)
    for name in realdata.TOXIC:
        out["toxic"][name] = _rates(v, (src == name) & toxic)
    for fam in sorted(set(family[toxic])):
        out["family"][fam] = _rates(v, toxic & (family == fam))
    out["auc_chat_like_vs_toxic"] = realtext.auc(v.toxic_score[toxic], v.toxic_score[chat_like])
    out["labelled"] = labelled_figures(lines, v)
    ins = src == "insults"
    out["insults"] = {
        "lines": int(ins.sum()),
        "flag_f1": _f1(v.flagged[ins], toxic[ins]),
        "non_insults_flagged": realtext.rate(v.flagged[ins & ~toxic]),
        "auc": realtext.auc(v.insult_score[ins & toxic], v.insult_score[ins & ~toxic]),
    }
    return out


def labelled_figures(lines: Sequence[Line], v: Verdicts) -> dict[str, dict[str, Any]]:
    """Flagged share per labelled source and family, and pooled over the sources: `hateful`
    (every hate line), `threat` (the held-out threat set), `group_neutral` (neutral
    statements about groups)."""
    src = np.asarray([ln.source for ln in lines])
    family = np.asarray([ln.family for ln in lines])
    out: dict[str, dict[str, Any]] = {}
    toxic = np.asarray([ln.toxic for ln in lines])
    for name in realdata.LABELLED:
        mine = src == name
        out[name] = {
            fam: {
                **_rates(v, mine & (family == fam)),
                "toxic": bool(toxic[mine & (family == fam)].any()),
            }
            for fam in sorted(set(family[mine]))
        }
    labelled = np.isin(src, realdata.FIXED)
    neutral = np.asarray([(ln.source, ln.family) in realdata.GROUP_NEUTRAL for ln in lines])
    out["pooled"] = {
        "hateful": _rates(v, labelled & (family == realdata.HATE)),
        "threat": _rates(v, labelled & (family == realdata.THREAT)),
        "group_neutral": _rates(v, neutral),
    }
    return out


def int8_gap(int8: dict[str, Any], fp32: dict[str, Any]) -> float:
    """The largest int8-vs-fp32 difference among the figures the report holds to 1 point:
    benign chat-like flagged and blocked, and each toxic set flagged (`judge` outputs)."""
    return float(
        max(
            abs(int8["benign"]["chat-like"]["flagged"] - fp32["benign"]["chat-like"]["flagged"]),
            abs(int8["benign"]["chat-like"]["blocked"] - fp32["benign"]["chat-like"]["blocked"]),
            *(
                abs(int8["toxic"][s]["flagged"] - fp32["toxic"][s]["flagged"])
                for s in realdata.TOXIC
            ),
        )
    )


def worst(lines: Sequence[Line], v: Verdicts) -> dict[str, list[dict[str, Any]]]:
    """The most confident false positives on chat-like text and the surest misses on toxic."""
    fps = [
        i
        for i, ln in enumerate(lines)
        if not ln.toxic and ln.source in realdata.CHAT_LIKE and v.flagged[i]
    ]
    fns = [i for i, ln in enumerate(lines) if ln.toxic and not v.flagged[i]]
    fps.sort(key=lambda i: -float(v.toxic_score[i]))
    fns.sort(key=lambda i: float(v.toxic_score[i]))

    def row(i: int) -> dict[str, Any]:
        reason = v.reason[i] if v.reason else None
        return {
            "text": lines[i].text,
            "source": lines[i].source,
            "family": lines[i].family,
            "score": round(float(v.toxic_score[i]), 3),
            "reason": reason,
            "blocked": bool(v.blocked[i]) if v.blocked is not None else None,
            "reviewed": bool(v.reviewed[i]) if v.reviewed is not None else None,
        }

    return {
        "false_positives": [row(i) for i in fps[:WORST]],
        "false_negatives": [row(i) for i in fns[:WORST]],
    }


def identity_probe(v: Verdicts, rows: Sequence[identity.Probe]) -> dict[str, Any]:
    """Per identity term: benign sentences flagged, hostile sentences caught."""
    terms = np.asarray([r.term for r in rows])
    hostile = np.asarray([r.hostile for r in rows])
    per: dict[str, dict[str, float]] = {}
    for term in identity.TERMS:
        t = terms == term
        per[term] = {
            "benign_flagged": realtext.rate(v.flagged[t & ~hostile]),
            "hostile_caught": realtext.rate(v.flagged[t & hostile]),
        }
    benign_fp = [r.text for i, r in enumerate(rows) if not r.hostile and v.flagged[i]]
    missed = [r.text for i, r in enumerate(rows) if r.hostile and not v.flagged[i]]
    return {
        "benign_flagged": realtext.rate(v.flagged[~hostile]),
        "hostile_caught": realtext.rate(v.flagged[hostile]),
        "worst_term_benign_flagged": max(p["benign_flagged"] for p in per.values()),
        "worst_term_hostile_caught": min(p["hostile_caught"] for p in per.values()),
        "per_term": per,
        "benign_flagged_examples": benign_fp[:WORST],
        "hostile_missed_examples": missed[:WORST],
    }


def run(scorers: dict[str, Scorer], with_worst: Sequence[str]) -> dict[str, Any]:
    """Every scorer on the real test lines and the identity probe."""
    names = realdata.BENIGN + realdata.TOXIC + realdata.LABELLED
    lines = realdata.select(realdata.load(), "test", names)
    texts = [ln.text for ln in lines]
    probe = identity.probe()
    probe_texts = [r.text for r in probe]
    out: dict[str, Any] = {
        "test_lines": {name: sum(1 for ln in lines if ln.source == name) for name in names},
        "scorers": {},
        "identity": {},
        "identity_lines": {
            "benign": sum(1 for r in probe if not r.hostile),
            "hostile": sum(1 for r in probe if r.hostile),
        },
    }
    for name, scorer in scorers.items():
        logger.info("scoring %d real test lines with %s", len(texts), name)
        v = scorer(texts)
        out["scorers"][name] = judge(lines, v)
        if name in with_worst:
            out["scorers"][name]["worst"] = worst(lines, v)
        out["identity"][name] = identity_probe(scorer(probe_texts), probe)
    return out
