"""The real-text machinery the report and the default policy stand on: pure parts, no model."""

from __future__ import annotations

import pickle
from itertools import product

import numpy as np
import pytest

from models.evaluation import realtext
from models.lines import corpus, identity, realdata, teachers
from moderator.policy.rules import Policy

LABELS = corpus.LABELS


def test_auc_counts_ties_as_half_and_orders() -> None:
    assert realtext.auc(np.array([0.9, 0.8]), np.array([0.1, 0.2])) == 1.0
    assert realtext.auc(np.array([0.1]), np.array([0.9])) == 0.0
    assert realtext.auc(np.array([0.5]), np.array([0.5])) == 0.5
    # 2 positives x 2 negatives: pairs won 1 + 0.5 (tie) + 1 + 1 = 3.5 of 4.
    assert realtext.auc(np.array([0.5, 0.9]), np.array([0.5, 0.1])) == pytest.approx(0.875)
    assert np.isnan(realtext.auc(np.array([]), np.array([0.1])))


def test_vectorised_flags_match_the_policy_decision_row_by_row() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.random((400, len(LABELS)), dtype=np.float32) ** 4  # many rows near 0
    for nudge, block in ((0.5, 0.5), (0.6, 0.95), (0.9, 0.99)):
        table = realtext.thresholds(nudge, block)
        policy = Policy.from_mapping({"name": "t", "version": 1, "labels": table})
        flagged, blocked = realtext.flag_block(matrix, LABELS, table)
        acts = [policy.decide(dict(zip(LABELS, map(float, row), strict=True)))[0] for row in matrix]
        assert list(flagged) == [a != "allow" for a in acts]
        assert list(blocked) == [a == "block" for a in acts]
        assert 0 < flagged.sum() < len(matrix)  # the check exercised both outcomes


def test_vectorised_actions_with_grey_zones_match_the_policy_row_by_row() -> None:
    rng = np.random.default_rng(11)
    matrix = rng.random((600, len(LABELS)), dtype=np.float32) ** 3
    table = realtext.thresholds(0.8, 0.95)
    table["threat"]["review"] = 0.6
    table["identity_attack"]["nudge"] = 0.65
    policy = Policy.from_mapping({"name": "t", "version": 1, "labels": table})
    ranks = realtext.action_ranks(matrix, LABELS, table)
    acts = [policy.decide(dict(zip(LABELS, map(float, row), strict=True)))[0] for row in matrix]
    assert [policy.actions[r] for r in ranks] == acts
    assert set(acts) == set(policy.actions)  # every action exercised
    assert list(realtext.reviewed(matrix, LABELS, table)) == [a == "review" for a in acts]


def test_a_score_exactly_on_the_threshold_acts() -> None:
    table = realtext.thresholds(0.7, 0.95)
    row = np.zeros((1, len(LABELS)), np.float32)
    row[0, LABELS.index("toxicity")] = np.float32(0.7)
    flagged, blocked = realtext.flag_block(row, LABELS, table)
    assert flagged[0]
    assert not blocked[0]


def test_thresholds_keep_obscene_silent_and_insult_block_high() -> None:
    table = realtext.thresholds(0.5, 0.6)
    assert "obscene" not in table
    assert table["insult"] == {"nudge": 0.5, "block": realtext.INSULT_BLOCK_FLOOR}
    assert table["threat"] == {"block": 0.6}


def test_tune_picks_the_most_recall_within_the_benign_limits() -> None:
    tox = LABELS.index("toxicity")
    benign = np.zeros((1000, len(LABELS)), np.float32)
    benign[:, tox] = np.linspace(0.0, 0.952, 1000)  # 0.2% of benign lines score >= 0.95
    toxic = np.zeros((10, len(LABELS)), np.float32)
    toxic[:, tox] = [0.6, 0.8, 0.9, 0.92, 0.96, 0.97, 0.98, 0.99, 0.999, 0.999]
    got = realtext.tune(benign, toxic, LABELS, max_flag=0.005, max_block=0.001, max_review=0)
    assert got["limits_met"]
    assert got["nudge"] == 0.95  # 0.9 would flag ~6% of benign lines
    assert got["dev_benign_flag_rate"] <= 0.005
    assert got["dev_toxic_recall"] == pytest.approx(0.6)
    strict = realtext.tune(benign + 1.0, toxic, LABELS, max_flag=0.0, max_block=0.0, max_review=0.0)
    assert not strict["limits_met"]


def test_splits_are_stable_disjoint_and_follow_the_shares() -> None:
    texts = [f"line number {i}" for i in range(4000)]
    splits = [realdata.split_of(t) for t in texts]
    assert splits == [realdata.split_of(t) for t in texts]  # deterministic
    share = {s: splits.count(s) / len(texts) for s in realdata.SPLITS}
    assert share["train"] == pytest.approx(0.5, abs=0.03)
    assert share["dev"] == pytest.approx(0.2, abs=0.03)
    # Spelling variants that normalise the same land in the same split.
    assert realdata.split_of("Hello   THERE") == realdata.split_of("hello there")
    evals = {realdata.split_of(t, realdata.EVAL_ONLY_SHARES) for t in texts}
    assert evals == {"dev", "test"}  # eval-only sources are never trained on


class _Teacher:
    def __init__(self, name: str, labels: tuple[str, ...], scores: list[list[float]]) -> None:
        self.name, self.labels, self._scores = name, labels, np.asarray(scores, np.float32)
        self.mapping = {
            "toxicity": ("toxic",),
            "severe_toxicity": ("severe_toxic",),
            "obscene": ("obscene",),
            "threat": ("threat",),
            "insult": ("insult",),
            "identity_attack": ("identity_hate",),
        }
        if name == "profanity_check":
            self.mapping = {"toxicity": ("profanity",)}

    def score(self, texts: object) -> np.ndarray:
        return self._scores


def test_distilled_targets_need_both_teachers_and_ignore_swearing() -> None:
    jig_labels = ("toxic", "severe_toxic", "obscene", "threat", "insult", "identity_hate")
    jig = _Teacher(
        "jigsaw_bilstm",
        jig_labels,
        [[0.99, 0.1, 0.99, 0.0, 0.9, 0.0], [0.95, 0.0, 0.9, 0.0, 0.05, 0.0]],
    )
    prof = _Teacher("profanity_check", ("profanity",), [[0.9], [0.2]])
    out = realdata.distilled(["you stupid fucking idiot", "oh crap, they're here"], [jig, prof])
    ins, tox, obs = (LABELS.index(k) for k in ("insult", "toxicity", "obscene"))
    assert out[0, ins] == pytest.approx(0.81)  # both agree: learnt as an insult
    assert out[0, tox] == pytest.approx(0.81)  # toxicity follows the hostile labels
    assert out[1, tox] == pytest.approx(0.01)  # jigsaw's "toxic" for swearing is not used
    assert out[1, ins] == pytest.approx(0.01)  # one teacher alone: a low target
    assert out[0, obs] == 1.0
    assert out[1, obs] == 1.0
    assert out[:, LABELS.index("self_harm")].tolist() == [0.0, 0.0]  # nobody covers it


def test_teacher_mapping_marks_uncovered_labels_nan_not_zero() -> None:
    prof = _Teacher("profanity_check", ("profanity",), [[0.7]])
    m = teachers.mapped(prof, prof.score(None))
    assert m[0, LABELS.index("toxicity")] == pytest.approx(0.7)
    assert np.isnan(m[0, LABELS.index("self_harm")])
    assert teachers.flagged(prof, prof.score(None)).tolist() == [True]


def test_keras_tokenizer_pickle_refuses_foreign_globals() -> None:
    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    with pytest.raises(pickle.UnpicklingError, match="refused"):
        teachers.KerasTokenizer.from_pickle(pickle.dumps(Evil()), maxlen=5)


def test_identity_probe_fills_every_template_with_every_term() -> None:
    rows = identity.probe()
    assert len(rows) == len(identity.TERMS) * (len(identity.BENIGN) + len(identity.HOSTILE))
    for term, hostile in product(identity.TERMS, (False, True)):
        mine = [r for r in rows if r.term == term and r.hostile == hostile]
        assert len(mine) == len(identity.HOSTILE if hostile else identity.BENIGN)
        assert all(term in r.text for r in mine)
    assert "{t}" not in " ".join(r.text for r in rows)


def test_tune_blocks_as_much_as_the_benign_block_limit_allows() -> None:
    threat = LABELS.index("threat")
    benign = np.zeros((1000, len(LABELS)), np.float32)
    benign[:, threat] = np.linspace(0.0, 0.9, 1000)  # nothing benign reaches 0.9 but one line
    toxic = np.zeros((4, len(LABELS)), np.float32)
    toxic[:, threat] = [0.92, 0.96, 0.99, 0.999]
    toxic[:, LABELS.index("toxicity")] = 0.99  # flagged by any nudge threshold up to 0.99
    got = realtext.tune(benign, toxic, LABELS, max_flag=0.01, max_block=0.01, max_review=0)
    # Many pairs flag every toxic line; the lowest block threshold within the limit blocks most.
    assert got["dev_toxic_recall"] == 1.0
    assert got["block"] == 0.9
    assert got["dev_toxic_blocked"] == 1.0


def test_tune_gives_the_hurting_labels_grey_zones_within_the_benign_limits() -> None:
    col = {label: LABELS.index(label) for label in LABELS}
    benign = np.zeros((1000, len(LABELS)), np.float32)
    benign[0:3, col["threat"]] = 0.72  # a threat grey zone at 0.7 flags 0.3% of benign lines
    benign[3:8, col["identity_attack"]] = 0.66  # one at 0.6 flags 0.5%
    benign[8:28, col["severe_toxicity"]] = 0.997  # any grey zone (or block) below 0.998 costs 2%
    toxic = np.zeros((10, len(LABELS)), np.float32)
    toxic[0:5, col["threat"]] = 0.71
    toxic[5:10, col["identity_attack"]] = 0.63
    families = ["threat"] * 5 + ["identity_attack"] * 5
    got = realtext.tune(benign, toxic, LABELS, max_flag=0.012, max_block=0.001,
                        max_review=0.004, families=families)  # fmt: skip
    assert got["limits_met"]
    assert got["block"] == 0.998
    grey = {label: (g["action"], g["threshold"]) for label, g in got["grey"].items()}
    assert grey == {
        "threat": ("review", 0.7),  # the cheapest grey zone gets review
        "identity_attack": ("nudge", 0.6),  # reviewing it too would send 0.8% to review
        "self_harm": ("review", 0.5),  # no evidence either way: as low as costs nothing
    }
    assert got["no_grey"] == ["severe_toxicity"]
    assert got["dev_toxic_recall"] == 1.0
    assert got["dev_benign_flag_rate"] == pytest.approx(0.008)
    assert got["dev_benign_review_rate"] == pytest.approx(0.003)
    assert got["dev_benign_block_rate"] == 0.0
    assert got["grey"]["threat"]["dev_family_caught"] == 5
    assert got["grey"]["threat"]["dev_family_caught_without"] == 0
    assert got["grey"]["identity_attack"]["dev_benign_added"] == 5
    # The table is a policy, and the policy decides as the tuner counted.
    policy = Policy.from_mapping({"name": "t", "version": 1, "labels": got["table"]})
    acts = [policy.decide(dict(zip(LABELS, map(float, row), strict=True)))[0] for row in toxic]
    assert acts == ["review"] * 5 + ["nudge"] * 5


def test_the_group_limit_lifts_the_label_that_flags_group_talk_not_the_pair() -> None:
    col = {label: LABELS.index(label) for label in LABELS}
    benign = np.zeros((1000, len(LABELS)), np.float32)
    toxic = np.zeros((10, len(LABELS)), np.float32)
    toxic[0:5, col["insult"]] = 0.8  # caught by any nudge threshold up to 0.8
    toxic[5:10, col["toxicity"]] = 0.96
    groups = np.zeros((20, len(LABELS)), np.float32)
    groups[:, col["toxicity"]] = 0.8  # talk about groups read as toxic, never as an insult
    got = realtext.tune(benign, toxic, LABELS, max_flag=0.01, max_block=0.001, max_review=0.004,
                        groups=groups, max_group_flag=0.05)  # fmt: skip
    assert got["limits_met"]
    assert got["dev_group_flag_rate"] == 0.0
    assert got["group_raised"] == {"toxicity": 0.85}  # the lowest point that unflags them
    assert got["table"]["toxicity"]["nudge"] == 0.85
    assert got["table"]["insult"]["nudge"] == got["nudge"] <= 0.8  # the pair's, insults caught
    assert got["dev_toxic_recall"] == 1.0
    # No label can be lifted out of group talk it reads as surely as the toxic lines: no table.
    groups[:, col["toxicity"]] = 0.999
    toxic[:, col["toxicity"]] = 0.999
    strict = realtext.tune(benign, toxic, LABELS, max_flag=0.01, max_block=0.001,
                           max_review=0.004, groups=groups, max_group_flag=0.05)  # fmt: skip
    assert not strict["limits_met"]


def test_tune_sends_nothing_to_review_when_the_review_limit_is_zero() -> None:
    threat = LABELS.index("threat")
    benign = np.zeros((1000, len(LABELS)), np.float32)
    benign[0:3, threat] = 0.72
    benign[3:5, threat] = 0.99  # keeps block above them
    toxic = np.zeros((5, len(LABELS)), np.float32)
    toxic[:, threat] = 0.7
    got = realtext.tune(benign, toxic, LABELS, max_flag=0.01, max_block=0.001, max_review=0.0)
    assert got["grey"]["threat"]["action"] == "nudge"
    assert got["dev_benign_review_rate"] == 0.0
    assert got["dev_toxic_recall"] == 1.0


def test_long_messages_are_as_rude_as_their_rudest_line() -> None:
    from models.lines import corpus

    zero = tuple(0.0 for _ in corpus.LABELS)
    insult = tuple(1.0 if lb in ("toxicity", "insult") else 0.0 for lb in corpus.LABELS)
    calm = [(f"see you at the match number {i} tonight", zero) for i in range(50)]
    pairs = [*calm, ("you are a worthless idiot", insult)]
    out = realdata.long_messages(pairs, n=20, chars=(250, 400))
    assert len(out) == 40
    benign, padded = out[:20], out[20:]
    assert all(len(text) >= 250 and target == zero for text, target in benign)
    assert all("worthless idiot" in text and target == insult for text, target in padded)
    assert all(len(text) >= 250 + len("you are a worthless idiot") for text, _ in padded)
    # the rude line stands at every kind of position, not only at an end
    assert any(not t.startswith("you are") and not t.endswith("idiot") for t, _ in padded)
