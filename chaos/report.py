"""RELIABILITY.md from the scenarios' results: machine, faults table, hostile inputs, notes."""

from __future__ import annotations

import datetime as dt
import platform
import re
from collections.abc import Sequence

from chaos.hostile import DECISION, CaseOutcome
from chaos.results import ScenarioResult
from loadgen.machine import machine_label

BUDGET_MS = 50

DEFINITIONS = f"""\
- **sent**: valid chat messages read back from the inbound topic (what the broker accepted).
- **decided**: those with at least one decision on the decisions topic by the end of the run.
- **lost**: sent but with neither a decision nor, where the broker refused its decision for good,
  a `publish_failed` dead letter carrying it (must be 0). Any other dead letter of a valid message
  would count as lost.
- **duplicated**: decisions beyond the first for one `message_id` (at-least-once redo).
- **time to recover**, both counted from the moment the fault is injected (the signal sent, the
  instances started, the burst begun):
  - *first decision*: until the first decision of a message **sent after** that moment arrives;
  - *p99 settled*: until the per-second p99 latency (messages grouped by the second they were
    sent in, latency from the scheduled send time to the decision's arrival) is back within the
    {BUDGET_MS} ms budget and stays there to the end of the run ("0.00 s": it never left; "-": not
    within the run).
- **p99**: over the whole run, first decisions only, open-loop (from the scheduled send time).
"""

STATIC_NOTES = """\
- **Publishing failures are provoked for real, but one way only.** The embedded Tansu broker is
  started with a JSON-schema registry whose schema for the decisions topic refuses decisions
  whose `decided_at_ms` falls in a window of a few seconds: the broker answers INVALID_RECORD
  (aiokafka reports it as `UnknownError`, code 87 is unknown to it), the moderator's delivery
  future fails, and its retry path runs. Tansu reads schemas only at start-up, and a resend carries
  the same bytes, so a refused decision stays refused. Once refused, a decision is re-sent in a
  batch of its own, and a refusal counts only while the topic takes other decisions. In the
  default row one message in five is refused: after `MODERATOR_PUBLISH_ATTEMPTS` (5) counted
  refusals the moderator dead-letters the input as `publish_failed` (its decision in a header)
  and commits past it once that is acknowledged. In the `MODERATOR_PUBLISH_ATTEMPTS=0` row every
  decision in the window is refused and re-sent forever, and the partition's commits are held
  until a restart decides the input again. (With the default, a window refusing every decision
  is held the same way while it lasts: a topic refusing everything looks like an outage.)
  Produce requests that time out and then succeed on a re-send are provoked by the 45 s broker
  freeze; timeouts are outages, never counted as refusals.
- **Broker unreachable** is a SIGSTOP of the broker process (connections stay open, requests
  hang): for 12 s, past the 6 s group session timeout, and for 45 s, past the producer's 40 s
  request timeout as well. Dropping the port (a firewall rule) was not tried: only loopback
  traffic is allowed and no firewall change was made.
- **Redis** is tried both ways: SIGKILL (connections refused, restarted empty on the same port)
  and SIGSTOP (calls hang until the 25 ms Redis timeout).
- **Time to take over after a crash** is mostly the group session timeout: the broker hands the
  dead member's partitions to the new one only when that session expires (plus Tansu's join of
  about 5 s). The three SIGKILL rows (3 s, 6 s = the default, 10 s = aiokafka's default) show the
  trade-off; a shorter session also means a member that stalls that long is dropped. Tansu also
  waits out the session after a graceful LeaveGroup (SIGTERM): two bare aiokafka consumers, one
  stopping cleanly and the next joining, took 11.1 s to join at a 6 s session and 7.1 s at 3 s,
  where a stock Kafka broker rebalances at the LeaveGroup. The SIGTERM row inherits that wait.
- **One broker**: Tansu with in-memory storage and one replica; leader elections, ISR shrinks and
  broker restarts with data loss are out of reach here.
- The machine is shared and noisy (another benchmark may run at the same time): latency figures
  are indicative, the loss, duplicate, order and exit-code figures are exact.
"""


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} ms"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def faults_table(results: Sequence[ScenarioResult]) -> list[str]:
    lines = [
        "| # | fault | sent | decided | lost | duplicated | first decision | p99 settled "
        "| p99 | result |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    lines += [_row(i, r) for i, r in enumerate(results, 1)]
    return lines


def _row(i: int, r: ScenarioResult) -> str:
    verdict = "**pass**" if r.passed else ("**error**" if r.error else "**FAIL**")
    return (
        f"| {i} | {_cell(r.title)}: {_cell(r.fault)} | {r.sent} | {r.decided} | {r.lost} "
        f"| {r.duplicated} | {_s(r.first_s)} | {_s(r.settled_s)} | {_ms(r.p99_ms)} "
        f"| {verdict} |"
    )


def details(r: ScenarioResult, index: int) -> list[str]:
    lines = [f"### {index}. {r.title}", "", f"Fault: {r.fault}. Ran {r.wall_s:.0f} s.", ""]
    if r.error:
        lines += [f"**The scenario did not complete**: `{_cell(r.error)}`", ""]
    for name, value in r.figures:
        lines.append(f"- {name}: {value}")
    if r.figures:
        lines.append("")
    for c in r.checks:
        mark = "✅" if c.ok else "❌"
        lines.append(f"- {mark} {c.what}" + (f" ({c.seen})" if c.seen else ""))
    lines.append("")
    for note in r.notes:
        lines += [note, ""]
    for name, tail in r.logs:
        lines += [f"Log tail of {name}:", "", "```", tail, "```", ""]
    return lines


def hostile_table(rows: Sequence[CaseOutcome]) -> list[str]:
    lines = [
        "| input | what | sent | got | expected | ok |",
        "|---|---|---:|---|---|---|",
    ]
    for row in rows:
        got = ", ".join(f"{_label(k)} ×{v}" for k, v in sorted((row.outcomes or {}).items()))
        expected = " or ".join(_label(k) for k in sorted(row.case.expect))
        lines.append(
            f"| `{row.case.name}` | {_cell(row.case.description)} | {row.sent} | {got} "
            f"| {expected} | {'yes' if row.ok else '**NO**'} |"
        )
    return lines


def _label(outcome: str) -> str:
    if outcome == DECISION:
        return "a decision"
    if outcome == "nothing":
        return "**nothing**"
    return f"DLQ `{outcome}`"


_ROW = re.compile(r"^\| (\d+) \| (.*)")
_PASSED = re.compile(r"\*\*\d+ of \d+ scenarios passed\.\*\*")


def add(existing: str, results: Sequence[ScenarioResult], *, quick: bool, command: str) -> str:
    """`existing` (a RELIABILITY.md `render` wrote) with `results` in it, for a run of a few
    scenarios: each replaces the row and section of the scenario with its title, or comes after
    the others; the pass count is recounted, and a line under the header names the run each
    added row came from. The hostile-input table and the list of failures are left as they were."""
    lines = existing.splitlines()
    run = f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC ({'quick' if quick else 'full'} run)"
    for r in results:
        if r.hostile:
            raise ValueError(f"{r.key}: a result with hostile-input rows needs a whole run")
        rows = {i: row for i, line in enumerate(lines) if (row := _row_of(line)) is not None}
        if not rows:
            raise ValueError("no faults table to add to")
        same = [i for i, (_, rest) in rows.items() if rest.startswith(f"{_cell(r.title)}: ")]
        if same:
            index = rows[same[0]][0]
            lines[same[0]] = _row(index, r)
        else:
            index = len(rows) + 1
            lines.insert(max(rows) + 1, _row(index, r))
        lines = _put_section(lines, details(r, index), r.title)
        for i in reversed([i for i, line in enumerate(lines) if line.startswith(f"Row {index} (")]):
            del lines[i - 1 if i and not lines[i - 1] else i : i + 1]  # with its blank line
        machine = next(i for i, line in enumerate(lines) if line.startswith("Machine: "))
        lines[machine + 1 : machine + 1] = ["", f"Row {index} ({r.title}) added by `{command}` "
                                            f"on {run}."]  # fmt: skip
    table = [line for line in lines if _row_of(line) is not None]
    passed = sum(1 for line in table if line.endswith("| **pass** |"))
    text = _PASSED.sub(f"**{passed} of {len(table)} scenarios passed.**", "\n".join(lines), 1)
    return text.rstrip() + "\n"


def _row_of(line: str) -> tuple[int, str] | None:
    """(number, the rest) of a faults-table row."""
    match = _ROW.match(line)
    return (int(match[1]), match[2]) if match else None


def _put_section(lines: list[str], section: list[str], title: str) -> list[str]:
    """`lines` with the `### N. title` section replaced by `section`, or `section` after the
    last section."""
    heading = re.compile(rf"^### \d+\. {re.escape(title)}$")
    starts = [i for i, line in enumerate(lines) if line.startswith("### ")]
    found = next((i for i in starts if heading.match(lines[i])), None)
    if found is None:
        if not starts:
            raise ValueError("no scenario sections to add to")
        found = end = _section_end(lines, starts[-1])
    else:
        end = _section_end(lines, found)
    return [*lines[:found], *section, *lines[end:]]


def _section_end(lines: list[str], start: int) -> int:
    return next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(("### ", "## "))),
        len(lines),
    )


def render(results: Sequence[ScenarioResult], *, quick: bool, wall_s: float, command: str) -> str:
    passed = sum(r.passed for r in results)
    lines = [
        "# Reliability",
        "",
        f"Regenerated by `{command}` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC "
        f"({'quick' if quick else 'full'} run, {wall_s / 60:.1f} min): every fault against real "
        "processes (`python -m moderator run` children, the embedded Tansu broker, a real "
        "`redis-server`), open-loop traffic from the load generator, every decision and dead "
        "letter read back from the topics.",
        "",
        f"Machine: **{machine_label()}**, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}.",
        "",
        f"**{passed} of {len(results)} scenarios passed.**",
        "",
        "## Faults",
        "",
        *faults_table(results),
        "",
        "Definitions:",
        "",
        DEFINITIONS,
    ]
    for i, r in enumerate(results, 1):
        lines += details(r, i)
    hostile = [row for r in results for row in r.hostile]
    if hostile:
        lines += [
            "## Hostile inputs",
            "",
            "Produced through the broker in one burst amid valid traffic; each record's outcome "
            "is read back from the dead-letter topic (by its untouched key, with the "
            "`moderator.error.code` header) or the decisions topic (by `message_id`).",
            "",
            *hostile_table(hostile),
            "",
        ]
    failed = [r for r in results if not r.passed]
    lines += ["## Notes", ""]
    if failed:
        lines += ["What failed in this run:", ""]
        for r in failed:
            why = r.error or "; ".join(f"{c.what} ({c.seen})" for c in r.checks if not c.ok)
            lines.append(f"- **{r.title}**: {_cell(why)}")
        lines.append("")
    lines.append(STATIC_NOTES)
    return "\n".join(lines).rstrip() + "\n"
