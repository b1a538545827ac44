"""A stopped fine-tuning resumes from its checkpoint and ends with the weights of a run never
stopped; another recipe or other data never resumes it. Real MiniLM, a few short steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from models.training import resume, train
from models.training.resume import Checkpoint

TEXTS = ["gg wp", "you are an idiot", "nice shot", "i will hurt you", "lol ok", "shut up"] * 4
CFG = train.TrainConfig(epochs=2, batch_size=4)


class Stop(Exception):
    """Stands for the kill: raised right after a checkpoint was written."""


class StopsAfter(Checkpoint):
    """Saves after every step, and stops the run after `n` saves."""

    def __init__(self, folder: Path, key: str, n: int) -> None:
        super().__init__(folder, key, every_s=0.0)
        self.left = n

    def save(self, state: dict[str, Any]) -> None:
        super().save(state)
        self.left -= 1
        if self.left == 0:
            raise Stop


def data() -> tuple[list[list[int]], Any]:
    ids = train.encode_texts(TEXTS)
    targets = torch.tensor([[float(i % 3 == 1)] for i in range(len(TEXTS))])
    return ids, targets


def weights(module: Any) -> dict[str, Any]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def test_a_stopped_run_resumes_and_ends_as_one_never_stopped(tmp_path: Path) -> None:
    ids, targets = data()
    key = resume.fingerprint(ids, targets, CFG)
    straight = weights(train.train_finetune(ids, targets, CFG, print))
    with pytest.raises(Stop):  # 3 of its 12 steps, mid-first-epoch
        train.train_finetune(ids, targets, CFG, print, StopsAfter(tmp_path, key, 3))
    assert torch.load(tmp_path / f"train-{key}.pt", weights_only=False)["step"] == 3
    with pytest.raises(Stop):  # 5 more: across the epoch's end
        train.train_finetune(ids, targets, CFG, print, StopsAfter(tmp_path, key, 5))
    said: list[str] = []
    resumed = weights(
        train.train_finetune(ids, targets, CFG, said.append, Checkpoint(tmp_path, key))
    )
    assert said == [f"  resumed at step 8/12 from {tmp_path / f'train-{key}.pt'}"]
    assert resumed.keys() == straight.keys()
    assert all(torch.equal(resumed[k], straight[k]) for k in straight), "the same weights"
    said.clear()  # stopped after training (in the export, say): run again, nothing is trained
    again = weights(train.train_finetune(ids, targets, CFG, said.append, Checkpoint(tmp_path, key)))
    assert said == [f"  resumed at step 12/12 from {tmp_path / f'train-{key}.pt'}"]
    assert all(torch.equal(again[k], straight[k]) for k in straight)
    assert [p.name for p in tmp_path.iterdir()] == [f"train-{key}.pt"], "kept for the caller"


def test_another_recipe_or_other_data_starts_afresh(tmp_path: Path) -> None:
    ids, targets = data()
    key = resume.fingerprint(ids, targets, CFG)
    assert resume.fingerprint(ids, targets, train.TrainConfig(epochs=3, batch_size=4)) != key
    assert resume.fingerprint(ids[:-1], targets[:-1], CFG) != key
    assert resume.fingerprint(ids, 1 - targets, CFG) != key
    with pytest.raises(Stop):
        train.train_finetune(ids, targets, CFG, print, StopsAfter(tmp_path, key, 2))
    other = resume.fingerprint(ids, 1 - targets, CFG)
    said: list[str] = []
    train.train_finetune(ids, 1 - targets, CFG, said.append, Checkpoint(tmp_path, other))
    assert said == [], "not resumed"
    assert [p.name for p in tmp_path.iterdir()] == [f"train-{other}.pt"], "the stale one removed"


def test_bf16_runs_the_forward_pass_in_bfloat16_and_keeps_the_weights_fp32() -> None:
    ids, targets = data()
    seen: dict[bool, set[Any]] = {}
    real_build = train.build_module
    for bf16 in (False, True):
        dtypes: set[Any] = set()

        def build(n: int, folder: Path | None = None, dtypes: set[Any] = dtypes) -> Any:
            module = real_build(n, folder)
            module.head.register_forward_hook(lambda _m, _i, out: dtypes.add(out.dtype))
            return module

        cfg = train.TrainConfig(epochs=1, batch_size=12, bf16=bf16)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(train, "build_module", build)
            module = train.train_finetune(ids, targets, cfg, print)
        seen[bf16] = dtypes
        assert {p.dtype for p in module.parameters()} == {torch.float32}, "weights stay fp32"
    assert seen == {False: {torch.float32}, True: {torch.bfloat16}}
    assert resume.fingerprint(ids, targets, train.TrainConfig(bf16=True)) != resume.fingerprint(
        ids, targets, train.TrainConfig()
    ), "a bf16 run never resumes an fp32 one"


def test_bf16_is_supported_only_where_the_cpu_has_it(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    assert train.bf16_supported(info)
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not train.bf16_supported(info)
    assert not train.bf16_supported(tmp_path / "missing")


def test_a_bf16_build_on_a_cpu_without_it_stops_before_reading_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from models import cli

    monkeypatch.setattr(train, "bf16_supported", lambda: False)
    args = cli._parser().parse_args(["build", "--bf16", "--out", "/nonexistent/chat-minilm"])
    assert args.func(args) == 2
    assert "--bf16 needs a CPU with avx512_bf16 or AMX" in capsys.readouterr().out
    assert not cli._parser().parse_args(["build"]).bf16, "fp32 unless asked"
