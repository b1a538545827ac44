"""The demo's shadow run without a broker: which model shadows, which disagreement it shows, and
the summary it prints from the moderator's /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devstack import demo_shadow
from devstack.child import Samples
from moderator.decide.classifier import ModelInfo

DECISIONS = "moderator_shadow_decisions_total"


def metrics(pairs: dict[tuple[str, str, str], int], language: str = "unnamed") -> Samples:
    """A /metrics page with the shadow's series: (primary, shadow, label) -> messages."""
    lines = [f'{DECISIONS}{{primary_action="{p}",shadow_action="{s}",label="{label}"}} {n}'
             for (p, s, label), n in pairs.items()]  # fmt: skip
    disagreed: dict[str, int] = {}
    for (p, s, label), n in pairs.items():
        if p != s:
            disagreed[label] = disagreed.get(label, 0) + n
    lines += [f'moderator_shadow_disagreements_total{{label="{label}",language="{language}"}} {n}'
              for label, n in disagreed.items()]  # fmt: skip
    lines += ["moderator_shadow_skipped_total 2", "moderator_shadow_queued 0",
              'moderator_shadow_records_total{result="sent"} 5',
              'moderator_shadow_records_total{result="failed"} 0']  # fmt: skip
    return Samples("\n".join(lines) + "\n")


def side(model: str, action: str, top: dict[str, Any] | None) -> dict[str, Any]:
    return {"model": model, "action": action, "reason": None, "top": top}


def record(message_id: str, primary_top: bool, shadow_top: bool) -> dict[str, Any]:
    top = {"label": "toxicity", "score": 0.87}
    return {"message_id": message_id, "channel_id": "c-1", "language": None,
            "primary": side("m@1", "nudge", top if primary_top else None),
            "shadow": side("m-candidate@1", "allow", top if shadow_top else None)}  # fmt: skip


def test_the_candidate_shadows_unless_the_user_names_a_shadow_model(tmp_path: Path) -> None:
    args, named = demo_shadow.shadow_args(tmp_path, {})
    assert args[0] == "--shadow-model"
    assert ModelInfo.load(Path(args[1])).name.endswith("-candidate")  # a real model directory
    assert named == demo_shadow.CANDIDATE
    mine = {demo_shadow.SHADOW_ENV: "/models/next"}
    assert demo_shadow.shadow_args(tmp_path / "other", mine) == (
        [],
        f"{demo_shadow.SHADOW_ENV}=/models/next",
    )
    assert not (tmp_path / "other").exists(), "no candidate made when the user's applies"


def test_the_disagreement_shown_is_one_both_models_read_else_the_first() -> None:
    gated, both = record("m-1", True, False), record("m-2", True, True)
    assert demo_shadow.chosen([gated, both]) == both
    assert demo_shadow.chosen([gated]) == gated
    assert demo_shadow.chosen([]) is None


def test_the_summary_counts_agreement_and_ranks_the_disagreeing_pairs() -> None:
    pairs = {("allow", "allow", "none"): 90, ("nudge", "allow", "toxicity"): 6,
             ("allow", "nudge", "obscene"): 3, ("review", "allow", "insult"): 1}  # fmt: skip
    samples = metrics(pairs)
    shown = demo_shadow.Disagreement(record("m-2", True, True), "aim bot")
    text = demo_shadow.report(samples, "the candidate", shown, "chat.shadow")
    lines = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert text.splitlines()[0] == "shadow model (the candidate)"
    assert lines["compared"].endswith("100 messages both models decided (skipped 2): agreed 90 "
                                      "(90.0%), disagreed 10")  # fmt: skip
    assert (
        lines["primary→shadow"].split(None, 1)[1] == "nudge→allow 6, allow→nudge 3, review→allow 1"
    )
    assert "  by label        toxicity 6, obscene 3, insult 1" in text.splitlines()
    assert "  by language     unnamed 10" in text.splitlines()
    assert "5 sent to chat.shadow (failed 0)" in lines["records"]
    assert "m-2 in c-1 (language not named): 'aim bot'" in lines["one"]
    assert lines["primary"].split()[1:] == ["m@1", "nudge;", "top", "score", "toxicity", "0.87"]
    assert lines["shadow"].split()[1:] == [
        "m-candidate@1",
        "allow;",
        "top",
        "score",
        "toxicity",
        "0.87",
    ]


def test_what_did_not_come_is_said() -> None:
    samples = metrics({("allow", "allow", "none"): 4})
    assert "none on the shadow topic" in demo_shadow.report(samples, "c", None, "t")
    missing = demo_shadow.Disagreement(record("m-1", True, False), None)
    text = demo_shadow.report(samples, "c", missing, "t")
    assert "its text not found on the chat topic" in text
    assert "the model not asked" in text
    assert "primary→shadow  none" in text
    assert "did not answer" in demo_shadow.report(None, "c", None, "t")
