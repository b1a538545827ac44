"""`moderator model …` as a new user meets it: what it needs, before it does anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from models import cli as models_cli
from models.lines import realdata
from models.subcommands import MODEL_EXTRA_MODULES
from moderator.cli import main


def _fail(*_: object, **__: object) -> None:
    raise AssertionError("the command started its work before saying the model extra is missing")


@pytest.mark.parametrize("command", ["build", "evaluate", "tradeoff"])
def test_a_command_without_the_model_extra_fails_before_any_download(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`build` used to download 88 MB of real text before its first torch import failed."""
    monkeypatch.setitem(sys.modules, "torch", None)  # not installed, as far as imports go
    monkeypatch.setattr(realdata, "load", _fail)
    for name in ("_build", "_evaluate", "_tradeoff"):
        monkeypatch.setattr(models_cli, name, _fail)
    assert main(["model", command]) == 2
    err = capsys.readouterr().err
    assert f"moderator model {command} needs the model extra (missing: torch)" in err
    assert "pip install 'chat-moderator-tools[model]'" in err


def test_ship_needs_no_model_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime's own dependencies compare and copy a model: `ship` is not refused."""
    for name in MODEL_EXTRA_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["model", "ship", "--check", "--from", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "needs the model extra" not in err
    assert f"ship: error: {tmp_path}: missing" in out


def test_evaluate_without_a_built_model_suggests_make_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert models_cli.main(["evaluate", "--model", str(tmp_path)]) == 2
    assert f"no model at {tmp_path}; run `make model` first" in capsys.readouterr().out
