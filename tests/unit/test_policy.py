from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from moderator.errors import PolicyError
from moderator.policy.rules import Policy, merge_specs
from moderator.policy.terms import default_terms


def test_the_default_policy_blocks_threats_and_lets_profanity_pass() -> None:
    # The thresholds are tuned for the shipped model (models/tuning.py); the shape is fixed.
    policy = Policy.load()
    assert policy.ident.startswith("default@")
    rules = {r.label: r.by_action for r in policy.rules}
    threat, insult = rules["threat"].get("block"), rules["insult"]
    assert threat is not None
    assert insult.get("nudge") is not None
    assert insult.get("block") is not None
    assert insult["nudge"] < insult["block"]
    assert policy.decide({"threat": threat, "toxicity": 0.0})[:2] == ("block", "threat")
    assert policy.decide({"insult": insult["nudge"]})[:2] == ("nudge", "insult")
    below = {"insult": insult["nudge"] - 0.001}
    assert policy.decide(below)[:2] == ("allow", None)
    assert policy.decide({"insult": insult["block"]})[:2] == ("block", "insult")
    assert "obscene" not in rules
    assert policy.decide({"obscene": 1.0})[:2] == ("allow", None)
    assert policy.decide({})[:2] == ("allow", None)


def test_block_wins_and_the_reason_is_the_widest_margin() -> None:
    policy = Policy.from_mapping(
        {
            "name": "p",
            "version": 3,
            "labels": {"a": {"nudge": 0.2}, "b": {"block": 0.5}, "c": {"block": 0.5}},
        }
    )
    assert policy.decide({"a": 0.99, "b": 0.6, "c": 0.8})[:2] == ("block", "c")
    assert policy.ident == "p@3"


def test_a_policy_file_replaces_the_default(tmp_path: Path) -> None:
    toml = tmp_path / "strict.toml"
    toml.write_text('name = "strict"\nversion = 2\n[labels.obscene]\nnudge = 0.5\n')
    assert Policy.load(toml).decide({"obscene": 0.7})[:2] == ("nudge", "obscene")
    json_file = tmp_path / "p.json"
    json_file.write_text('{"name": "j", "version": 1, "labels": {"insult": {"block": 0.1}}}')
    assert Policy.load(json_file).decide({"insult": 0.2})[:2] == ("block", "insult")


@pytest.mark.parametrize(
    "data",
    [
        {"version": 1, "labels": {}},
        {"name": "x", "version": 1, "labels": {"a": {"nudge": 1.5}}},
        {"name": "x", "version": 1, "labels": {"a": {"warn": 0.5}}},
        {"name": "x", "version": 1, "labels": {"a": {}}},
        {"name": "x", "version": 1, "labels": {"a": {"block": "high"}}},
    ],
)
def test_invalid_policies_are_rejected(data: dict[str, object]) -> None:
    with pytest.raises(PolicyError):
        Policy.from_mapping(data)


def test_labels_the_model_lacks_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        Policy.load().check_labels(["toxicity", "insult"])
    assert "self_harm" in caplog.text


def test_a_tie_goes_to_the_label_listed_first() -> None:
    # "kys" saturates both; the more specific label is listed first in the default policy.
    assert Policy.load().decide({"severe_toxicity": 1.0, "self_harm": 0.999})[:2] == (
        "block",
        "self_harm",
    )


def test_review_sits_between_nudge_and_block_without_being_listed() -> None:
    policy = Policy.from_mapping(
        {
            "name": "p",
            "version": 1,
            "labels": {"insult": {"nudge": 0.5, "review": 0.8, "block": 0.95}, "a": {"nudge": 0.1}},
        }
    )
    assert policy.actions == ("allow", "nudge", "review", "block")
    assert policy.decide({"insult": 0.85, "a": 1.0}) == ("review", "insult", "medium")
    assert policy.decide({"insult": 0.97, "a": 1.0})[:2] == ("block", "insult")
    assert policy.decide({"insult": 0.6}) == ("nudge", "insult", "low")
    assert policy.rules[0].by_action == {"nudge": 0.5, "review": 0.8, "block": 0.95}


def test_a_review_grey_zone_below_block_in_either_form() -> None:
    older = {"threat": {"review": 0.6, "block": 0.97}, "toxicity": {"nudge": 0.75}}
    newer = {"threat": {"medium": "review", "high": "block",
                        "thresholds": {"medium": 0.6, "high": 0.97}},
             "toxicity": {"medium": "nudge", "thresholds": {"medium": 0.75}}}  # fmt: skip
    for labels in (older, newer):
        policy = Policy.from_mapping({"name": "p", "version": 1, "labels": labels})
        assert policy.decide({"threat": 0.59, "toxicity": 0.5})[:2] == ("allow", None)
        # review outranks a nudge on another label, whatever the margins
        assert policy.decide({"threat": 0.6, "toxicity": 1.0})[:2] == ("review", "threat")
        assert policy.decide({"threat": 0.97, "toxicity": 1.0})[:2] == ("block", "threat")
        assert policy.rules[0].by_action == {"review": 0.6, "block": 0.97}


def test_a_deny_term_can_send_to_review() -> None:
    policy = Policy.from_mapping(
        {"name": "p", "version": 1, "deny": [{"term": "doxx", "action": "review"}]}
    )
    assert policy.deny_ruling("gonna doxx him") == ("review", "deny:policy:custom", "high")


def test_a_new_action_is_a_policy_change() -> None:
    # `warn` between nudge and block, from the file alone: severity is the order listed.
    policy = Policy.from_mapping(
        {
            "name": "p",
            "version": 1,
            "actions": ["nudge", "warn", "block"],
            "labels": {"insult": {"nudge": 0.5, "warn": 0.8, "block": 0.95}, "a": {"nudge": 0.1}},
        }
    )
    assert policy.actions == ("allow", "nudge", "warn", "block")
    assert policy.decide({"insult": 0.85, "a": 1.0})[:2] == ("warn", "insult")
    assert policy.decide({"insult": 0.97})[:2] == ("block", "insult")
    assert policy.decide({"insult": 0.6})[:2] == ("nudge", "insult")


@pytest.mark.parametrize(
    "actions", [[], ["allow", "block"], ["block", "block"], "block", [""], [1]]
)
def test_invalid_action_lists_are_rejected(actions: object) -> None:
    with pytest.raises(PolicyError):
        Policy.from_mapping({"name": "x", "version": 1, "actions": actions, "labels": {}})


def test_a_threshold_for_an_action_the_policy_lacks_is_rejected() -> None:
    with pytest.raises(PolicyError, match="'warn'"):
        Policy.from_mapping(
            {"name": "x", "version": 1, "actions": ["warn"], "labels": {"a": {"block": 0.5}}}
        )


def test_json_null_means_no_threshold() -> None:
    policy = Policy.from_mapping(
        {"name": "j", "version": 1, "labels": {"a": {"nudge": None, "block": 0.5}}}
    )
    assert policy.decide({"a": 0.4})[:2] == ("allow", None)
    assert policy.decide({"a": 0.6})[:2] == ("block", "a")


def test_the_tuner_writes_a_policy_it_reads_back(tmp_path: Path) -> None:
    from models.evaluation import realtext, tuning

    table = realtext.thresholds(0.75, 0.95)
    table["threat"]["review"] = 0.6
    path = tmp_path / "policy.toml"
    path.write_text(tuning.render_policy(table, "# tuned\n", 7))
    assert tuning.read_thresholds(path) == (7, table)
    assert Policy.load(path).decide({"threat": 0.96, "toxicity": 0.8})[:2] == ("block", "threat")
    assert Policy.load(path).decide({"threat": 0.7, "toxicity": 0.8})[:2] == ("review", "threat")
    assert tuning._windows_raise(path) == 0.0
    path.write_text(tuning.render_policy(table, "# tuned\n", 8, windows_raise=0.35))
    assert tuning._windows_raise(path) == 0.35
    assert tuning.read_thresholds(path) == (8, table)


def test_the_policy_header_says_which_labels_the_group_limit_lifted() -> None:
    from models.evaluation import tuning

    result = {"group_raised": {"toxicity": 0.99}, "max_group_flag": 0.05,
              "dev_group_flag_rate": 0.049}  # fmt: skip
    assert tuning.raised_lines(result) == [
        "toxicity: no threshold below 0.99 (the pair's would flag more than 5% of the neutral"
        " statements about groups; dev: 4.9% flagged)"
    ]
    assert tuning.raised_lines({}) == []


def test_the_smallest_raise_within_the_long_message_limit_is_chosen() -> None:
    from models.evaluation import long_text

    policy = Policy.from_mapping({"name": "p", "version": 1, "labels": {"a": {"block": 0.5}}})
    benign = [({"a": 0.6}, 4)] * 3 + [({"a": 0.0}, 4)] * 97  # 3% flagged with no raise
    assert long_text.flag_rate(policy, benign, 0.0) == 0.03
    # r = raise x 3/4 for 4 windows; 0.6 passes 0.5 raised while 0.5 + 0.5 r <= 0.6, r <= 0.2
    assert long_text.flag_rate(policy, benign, 0.25) == 0.03
    assert long_text.flag_rate(policy, benign, 0.3) == 0.0
    assert long_text.flag_rate(policy, [({"a": 0.6}, 1)], 0.9) == 1.0  # one window: as written


BOUNDARY = Policy.from_mapping(
    {
        "name": "edges",
        "version": 1,
        "actions": ["nudge", "review", "block"],
        "labels": {"a": {"nudge": 0.25, "review": 0.5, "block": 0.75}},
    }
)


@pytest.mark.parametrize(
    ("score", "action"),
    [
        (0.0, "allow"),
        (math.nextafter(0.25, 0.0), "allow"),
        (0.25, "nudge"),  # exactly on a threshold reaches it
        (math.nextafter(0.5, 0.0), "nudge"),
        (0.5, "review"),
        (math.nextafter(0.75, 0.0), "review"),
        (0.75, "block"),
        (1.0, "block"),
    ],
)
def test_a_score_exactly_on_a_threshold_reaches_it_and_one_just_below_does_not(
    score: float, action: str
) -> None:
    assert BOUNDARY.decide({"a": score})[:2] == (action, None if action == "allow" else "a")


def test_a_threshold_of_zero_triggers_on_any_score_and_one_only_on_certainty() -> None:
    policy = Policy.from_mapping(
        {"name": "p", "version": 1, "labels": {"a": {"nudge": 0.0}, "b": {"block": 1.0}}}
    )
    assert policy.decide({"a": 0.0})[:2] == ("nudge", "a")
    assert policy.decide({"b": math.nextafter(1.0, 0.0)})[:2] == ("allow", None)
    assert policy.decide({"b": 1.0})[:2] == ("block", "b")


def test_the_reason_is_the_label_past_its_threshold_by_most_not_the_highest_score() -> None:
    policy = Policy.from_mapping(
        {"name": "p", "version": 1, "labels": {"a": {"block": 0.8}, "b": {"block": 0.2}}}
    )
    assert policy.decide({"a": 0.9, "b": 0.6})[:2] == ("block", "b"), "b is 0.4 past, a only 0.1"


@pytest.mark.parametrize(
    ("data", "names"),
    [
        ({"version": 1, "labels": {}}, "missing 'name'"),
        ({"name": "", "version": 1, "labels": {"a": {"nudge": 0.5}}}, "'name'"),
        ({"name": 5, "version": 1, "labels": {"a": {"nudge": 0.5}}}, "'name'"),
        ({"name": "x", "version": 1, "labels": ["a"]}, "'labels'"),
        ({"name": "x", "version": 1, "actions": [], "labels": {}}, "least severe first"),
        ({"name": "x", "version": 1, "labels": {"a": {"warn": 0.5}}}, "'nudge', 'review', 'block'"),
        ({"name": "x", "version": 1, "labels": {"a": {"block": 2}}}, "labels.a.block"),
        ({"name": "x", "version": 1, "labels": {"a": {}}}, "labels.a sets no threshold"),
    ],
)
def test_a_bad_policy_is_refused_with_a_message_naming_the_file_and_the_setting(
    data: dict[str, object], names: str
) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.from_mapping(data, source="strict.toml")
    assert str(info.value).startswith("strict.toml: ")
    assert names in str(info.value)


def test_a_policy_file_that_cannot_be_read_or_is_wrong_is_named_in_the_error(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(PolicyError, match=r"missing\.toml: cannot read the policy"):
        Policy.load(missing)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('name = "w"\nversion = 1\n[labels.a]\nblock = 7\n')
    with pytest.raises(PolicyError) as info:
        Policy.load(wrong)
    assert str(info.value).startswith(f"{wrong}: labels.a.block")


def test_the_warning_names_the_policy_and_every_label_the_model_lacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = Policy.from_mapping(
        {"name": "p", "version": 4, "labels": {"a": {"nudge": 0.5}, "b": {"nudge": 0.5}}}
    )
    with caplog.at_level(logging.WARNING):
        policy.check_labels(["c"])
    assert caplog.messages == ["policy p@4 names labels the model does not produce, they never "
                               "trigger: a, b"]  # fmt: skip


# -- severities, deny and allow terms, partial policies ----------------------------------------

SEVERE = {
    "name": "sev", "version": 1,
    "severity": {"low": 0.4, "medium": 0.7, "high": 0.9},
    "labels": {
        "threat": {"high": "block"},
        "insult": {"medium": "nudge", "high": "block", "thresholds": {"high": 0.95}},
        "obscene": {"low": "allow"},
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("scores", "verdict"),
    [
        ({"threat": 0.95}, ("block", "threat", "high")),
        ({"threat": 0.8}, ("allow", None, None)),  # medium, but only high acts
        ({"insult": 0.8}, ("nudge", "insult", "medium")),
        ({"insult": 0.93}, ("nudge", "insult", "medium")),  # its own high starts at 0.95
        ({"insult": 0.96}, ("block", "insult", "high")),
        ({"obscene": 1.0}, ("allow", None, None)),  # low profanity allowed, even at 1.0
        ({"insult": 0.8, "threat": 0.99}, ("block", "threat", "high")),
    ],
)
def test_scores_map_to_severities_and_severities_to_actions_per_label(
    scores: dict[str, float], verdict: tuple[str, str | None, str | None]
) -> None:
    assert Policy.from_mapping(SEVERE).decide(scores) == verdict


def test_an_unmapped_severity_takes_the_action_of_the_one_below() -> None:
    policy = Policy.from_mapping({"name": "x", "version": 1, "labels": {"a": {"low": "nudge"}}})
    assert policy.decide({"a": 0.99}) == ("nudge", "a", "high")
    assert policy.decide({"a": 0.49}) == ("allow", None, None)  # the default low starts at 0.5


def test_the_older_threshold_per_action_form_takes_the_top_severities() -> None:
    policy = Policy.from_mapping(
        {"name": "x", "version": 1, "labels": {"a": {"nudge": 0.6, "block": 0.8}}}
    )
    assert policy.decide({"a": 0.7}) == ("nudge", "a", "low")
    assert policy.decide({"a": 0.8}) == ("block", "a", "high")
    assert policy.rules[0].by_action == {"nudge": 0.6, "block": 0.8}
    two = Policy.from_mapping(
        {"name": "x", "version": 1, "actions": ["nudge", "block"], "labels": {"a": {"nudge": 0.6}}}
    )
    assert two.decide({"a": 0.7}) == ("nudge", "a", "medium")  # two actions: the top two


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"labels": {"a": {"high": "obliterate"}}}, "labels.a.high: 'obliterate' is not one of"),
        ({"labels": {"a": {"extreme": "block"}}}, "labels.a may only set low, medium, high"),
        ({"labels": {"a": {"high": 0.5, "medium": "nudge"}}}, "labels.a mixes thresholds"),
        ({"labels": {"a": {"high": "block", "thresholds": {"high": 2}}}}, "thresholds.high"),
        ({"severity": {"high": "0.9"}}, "severity.high must be a number in 0..1"),
        (
            {"severity": {"extreme": 0.9}},
            "severity may only set low, medium, high (scores in 0..1)",
        ),
        ({"severity": 0.9}, "p.json: severity may only set low, medium, high (scores in 0..1)"),
        (
            {"labels": {"a": {"high": "block", "thresholds": {"extreme": 0.5}}}},
            "labels.a.thresholds may only set low, medium, high (scores in 0..1)",
        ),
        ({"deny": "potato"}, "deny must be a list"),
        ({"deny": [{"term": " "}]}, "deny[0].term must be a non-empty string"),
        ({"deny": [{"term": "x", "action": "allow"}]}, "deny[0].action: 'allow'"),
        ({"deny": [{"term": "x", "colour": "red"}]}, "deny[0] may only set"),
        ({"allow": [3]}, "'allow' must be a list of non-empty strings"),
        ({"default_terms": {"high": "smite"}}, "default_terms.high: 'smite'"),
    ],
)
def test_each_mistake_in_the_new_fields_is_named(spec: dict[str, object], error: str) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.from_mapping({"name": "x", "version": 1, **spec}, source="p.json")
    assert str(info.value).startswith("p.json: ")
    assert error in str(info.value)


def test_a_deny_term_decides_and_an_allowed_phrase_removes_only_its_own_effect() -> None:
    policy = Policy.from_mapping({
        "name": "x", "version": 1,
        "deny": [{"term": "potato", "category": "custom", "action": "block"},
                 {"term": "kill", "category": "violence", "action": "nudge", "severity": "medium"}],
        "allow": ["kill la kill"],
    })  # fmt: skip
    assert policy.deny_ruling("i like potato") == ("block", "deny:policy:custom", "high")
    assert policy.deny_ruling("kill it") == ("nudge", "deny:policy:violence", "medium")
    assert policy.deny_ruling(policy.without_allowed("watching kill la kill")) is None
    both = policy.without_allowed("kill la kill, then kill it")
    assert policy.deny_ruling(both) == ("nudge", "deny:policy:violence", "medium")
    assert policy.deny_ruling("gg wp") is None


def test_a_partial_policy_takes_what_it_leaves_out_from_the_one_below() -> None:
    base = Policy.load().spec
    over = {"name": "mild", "version": 2, "labels": {"insult": {"high": "nudge"}},
            "deny": [{"term": "potato"}], "allow": ["kill la kill"]}  # fmt: skip
    merged = merge_specs(base, over)
    policy = Policy.from_mapping(merged)
    assert policy.ident == "mild@2"
    assert merged["labels"]["threat"] == base["labels"]["threat"]  # kept from the default
    assert merged["labels"]["insult"] == {"high": "nudge"}  # replaced, label by label
    assert policy.decide({"insult": 0.99}) == ("nudge", "insult", "high")
    assert policy.decide({"threat": 0.999})[0] == "block"
    lists = merge_specs(merged, {"name": "m", "version": 3, "deny": [{"term": "yam"}]})
    assert [d["term"] for d in lists["deny"]] == ["potato", "yam"]  # lists add up


def test_a_partial_policy_sets_a_review_threshold_over_the_default() -> None:
    base = Policy.load()
    over = {"name": "kids", "version": 1, "labels": {"insult": {"review": 0.4, "block": 0.9}}}
    policy = Policy.from_mapping(merge_specs(base.spec, over))
    assert policy.decide({"insult": 0.45}) == ("review", "insult", "medium")
    assert policy.decide({"insult": 0.95})[:2] == ("block", "insult")
    # the default's other labels, grey zones included, are kept
    kept = {r.label: r.by_action for r in policy.rules if r.label != "insult"}
    assert kept == {r.label: r.by_action for r in base.rules if r.label != "insult"}


def test_every_label_that_can_hurt_has_an_action_below_block_in_the_default_policy() -> None:
    from models.evaluation.realtext import HURTING_LABELS

    rules = {r.label: r.by_action for r in Policy.load().rules}
    for label in HURTING_LABELS:
        grey = {a: t for a, t in rules[label].items() if a != "block"}
        assert grey, f"{label} has no action below block"
        assert all(t < rules[label]["block"] for t in grey.values()), label


def test_the_packaged_term_list_is_used_by_severity() -> None:
    spec = {"name": "x", "version": 1}
    assert Policy.from_mapping(spec).terms is None
    strict = Policy.from_mapping({**spec, "default_terms": {"medium": "nudge", "high": "block"}})
    off = Policy.from_mapping({**spec, "default_terms": {"medium": "allow", "high": "allow"}})
    assert strict.terms is not None
    assert off.terms is None
    verdicts = [strict.deny_ruling(t.term) for t in default_terms() if t.severity != "low"]
    assert verdicts
    assert all(
        v is not None and v.reason and v.reason.startswith("deny:default:") for v in verdicts
    )
