"""The command line as a supervisor sees it: exit codes, `--version`, the workers' flags."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from moderator import __version__
from moderator.admin import progress
from moderator.admin.score import SCORE_INPUT
from moderator.cli import main
from moderator.config import DEFAULT_MODEL_DIR
from moderator.decide.classifier import ModelInfo
from moderator.errors import EX_CONFIG
from moderator.workers import SUPERVISED_FLAG, worker_argv


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--threads", "0"],
        ["run", "--budget-ms", "fast"],
        ["run", "--kafka-bootstrap", "no-port"],
        ["run", "--model-dir", "/nonexistent"],
        ["score", "--model", "/nonexistent"],
        ["score", "--max-windows", "0"],
    ],
)
def test_a_configuration_error_exits_78_naming_the_setting(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """78 (EX_CONFIG) is what the systemd unit's RestartPreventExitStatus= names."""
    assert main(argv) == EX_CONFIG == 78
    err = capsys.readouterr().err
    assert err.startswith("moderator: error: ")
    assert "MODERATOR_" in err or "/nonexistent" in err


def test_score_reads_a_long_line_in_windows_up_to_max_windows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    friendly = "hey everyone, hope you are all having a great day, the stream was fun. " * 40
    monkeypatch.setattr("sys.stdin", io.StringIO(orjson.dumps({"text": friendly}).decode() + "\n"))
    assert main(["score", "--max-windows", "2"]) == 0
    row = orjson.loads(capsys.readouterr().out)
    assert row["truncated"] is True
    assert row["span"] != [0, len(friendly)]
    assert row["action"] != "allow"  # unread text is never silently allowed


def test_score_names_the_line_and_the_expected_format_of_bad_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain text used to get a bare `invalid_json`, and `{"text": 5}` `missing_field`; line
    numbers count every input line (blank ones too) across batches."""
    lines = ["hello there", "", '{"text": 5}', "[1, 2]", '{"txt": "gg"}', '{"text": "gg wp"}']
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["score", "--batch", "2"]) == 1
    out, err = capsys.readouterr()
    rows = [orjson.loads(line) for line in out.splitlines()]
    errors = [(row["line"], row["error"]["code"]) for row in rows if "error" in row]
    assert errors == [(1, "invalid_json"), (3, "wrong_type"), (4, "not_object"),
                      (5, "missing_field")]  # fmt: skip
    for row in rows[:-1]:
        message = row["error"]["message"]
        assert message.startswith(f"line {row['line']}: ")
        assert message.endswith(f"expected {SCORE_INPUT}")
    assert rows[-1]["text"] == "gg wp"
    assert "action" in rows[-1]
    assert "4 line(s) not decided (their 'error' on stdout names the line)" in err
    assert "\r" not in err, "no progress bar when stderr is not a terminal"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_score_draws_a_progress_bar_on_a_terminal_and_erases_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = tmp_path / "chat.jsonl"
    source.write_text("".join(f'{{"text": "line {i}"}}\n' for i in range(40)))
    terminal = Terminal()
    monkeypatch.setattr(progress, "DELAY_S", 0.0)  # drawn from the first batch on
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    with source.open() as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        monkeypatch.setattr("sys.stderr", terminal)
        assert main(["score", "--batch", "10"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 40
    drawn = terminal.getvalue()
    assert drawn.count("scoring [") == 4
    assert "100% 40 lines" in drawn
    assert drawn.endswith(progress.ERASE)


def test_version_names_the_package_and_the_default_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    ident = ModelInfo.load(DEFAULT_MODEL_DIR).ident
    assert capsys.readouterr().out == f"moderator {__version__} (default model {ident})\n"


def test_workers_get_their_own_metrics_port_and_threads_not_the_supervisors() -> None:
    """The supervisor sets MODERATOR_METRICS_PORT and MODERATOR_THREADS per worker; a flag
    passed on unchanged would override them (every worker on one port: "Address in use")."""
    argv = ["--workers", "2", "--metrics-port", "9108", "--threads=4", "--create-topics",
            "--metrics-host", "0.0.0.0", "--workers=3", "--budget-ms", "40"]  # fmt: skip
    assert worker_argv(argv) == [
        "--create-topics", "--metrics-host", "0.0.0.0", "--budget-ms", "40", SUPERVISED_FLAG
    ]  # fmt: skip
