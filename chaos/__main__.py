"""`python -m chaos [--quick] [--only KEYS [--add]]`: run the fault scenarios, write
RELIABILITY.md (with --add, put the scenarios run into the existing report instead)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from chaos.procs import default_log_dir
from chaos.report import add, render
from chaos.results import ScenarioResult
from chaos.scenarios import SCENARIOS, Context, Plan, run_scenario
from moderator import loop
from moderator.config import REPO_ROOT, Settings

log = logging.getLogger("chaos")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter traffic and bursts")
    parser.add_argument(
        "--only", default="", help=f"comma-separated subset of {','.join(SCENARIOS)}"
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "RELIABILITY.md")
    parser.add_argument("--add", action="store_true",
                        help="put the scenarios run (--only) into the existing --out report: each "
                             "replaces its row and section, or comes after the others")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    parser.add_argument("--log-dir", type=Path, default=default_log_dir(),
                        help="where the moderators' logs go")  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true")
    return parser


async def _run(
    ctx: Context, keys: Sequence[str], on_result: Callable[[list[ScenarioResult]], None]
) -> list[ScenarioResult]:
    results: list[ScenarioResult] = []
    for key in keys:
        log.info("scenario %s: %s", key, SCENARIOS[key][1])
        result = await run_scenario(ctx, key)
        verdict = "pass" if result.passed else "FAIL"
        log.info("scenario %s: %s in %.0f s (sent %d, decided %d, lost %d, duplicated %d)%s",
                 key, verdict, result.wall_s, result.sent, result.decided, result.lost,
                 result.duplicated, f": {result.error}" if result.error else "")  # fmt: skip
        for check in result.checks:
            if not check.ok:
                log.warning("  %s: %s", check.what, check.seen)
        results.append(result)
        on_result(results)  # the report so far: an interrupted run still leaves one
        await asyncio.sleep(1.0)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")  # fmt: skip
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(SCENARIOS)
    unknown = [k for k in keys if k not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}", file=sys.stderr)
        return 2
    if args.add and not args.out.is_file():
        print(f"--add needs an existing report at {args.out}", file=sys.stderr)
        return 2
    before = args.out.read_text() if args.add else ""
    settings = Settings.from_env()
    settings.check_model_dir()
    ctx = Context(Plan.make(args.quick), settings.model_dir, args.log_dir)
    start = time.monotonic()
    command = "python -m chaos" + (" --quick" if args.quick else "")
    if args.only:
        command += f" --only {args.only}" + (" --add" if args.add else "")

    def write(results: list[ScenarioResult]) -> None:
        wall_s = time.monotonic() - start
        if args.add:
            text = add(before, results, quick=args.quick, command=command)
        else:
            text = render(results, quick=args.quick, wall_s=wall_s, command=command)
            if len(results) < len(keys):
                text += f"\n_Partial: {len(results)} of {len(keys)} scenarios so far._\n"
        args.out.write_text(text)
        if args.json is not None:
            args.json.write_bytes(orjson.dumps([r.as_dict() for r in results],
                                               option=orjson.OPT_INDENT_2))  # fmt: skip

    results = loop.run(_run(ctx, keys, write))
    wall_s = time.monotonic() - start
    passed = sum(r.passed for r in results)
    print(f"{passed}/{len(results)} scenarios passed in {wall_s:.0f} s; wrote {args.out}")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
