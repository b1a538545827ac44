"""`moderator score`: JSON lines on stdin, one decision per line on stdout, without Kafka or
Redis: the pipeline's screen, model and policy (screen.decide_texts) on each line's text, and
the policy's user rules (moderator/users/escalation.py) on this process's state, line after line,
for lines with a `user_id`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from moderator.admin.progress import Progress
from moderator.commandline import command, log_flags
from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.decide.screen import Judged, Reader, decide_texts, reader_for
from moderator.errors import InvalidRecord
from moderator.metrics import Metrics
from moderator.policy.rules import Policy
from moderator.records import ChatMessage, json_type, required_string
from moderator.users.escalation import Escalated, Escalation

# What `moderator score` reads, said in its help and in every input error.
SCORE_INPUT = 'one JSON object per line with a string field "text", e.g. {"text": "gg wp"}'


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `score` to the `moderator` command line."""
    score = command(
        sub,
        "score",
        "JSON lines with `text` on stdin, decisions on stdout",
        """
        echo '{"text": "gg wp, that clutch was insane"}' | moderator score
        moderator score < chat.jsonl > decisions.jsonl
        moderator score --policy my-policy.toml --max-windows 4 < chat.jsonl
    """,
        description=f"""\
Decide chat lines without Kafka or Redis, with the model and policy `run` would use.

input (stdin): {SCORE_INPUT}.
  message_id, channel_id and user_id are copied to the output; blank lines are skipped.
  With a user_id, the policy's [users] rules apply as `run` would apply them, on this
  process's state, in line order (sent_at_ms, if given, places a line in time; else now).
output (stdout): one decision per input line, in order (action, reason, severity, scores,
  model, policy, span, truncated, language, strikes, escalated). A line that is not such an
  object gets {{"line": N, "error": {{"code": ..., "message": ...}}}} instead; exit code 1.
On a terminal, stderr shows a progress bar; piped or redirected, nothing.""",
    )
    score.add_argument("--model", type=Path, default=None, help="model directory")
    score.add_argument("--policy", type=Path, default=None, help="policy file (TOML or JSON)")
    score.add_argument("--threads", type=int, default=None, help="intra-op threads")
    score.add_argument("--batch", type=int, default=32, help="lines scored together")
    score.add_argument(
        "--max-windows",
        type=int,
        default=None,
        help="windows read per message [MODERATOR_MAX_WINDOWS]",
    )
    log_flags(score, argparse.SUPPRESS)
    score.set_defaults(command=_cmd_score)


def _cmd_score(args: argparse.Namespace) -> int:
    settings = Settings.from_env(
        model_dir=args.model,
        threads=args.threads,
        policy=args.policy,
        max_windows=args.max_windows,
    )
    settings.check_model_dir()
    classifier = Classifier(settings.model_dir, threads=settings.effective_threads)
    reader = reader_for(classifier, max_windows=settings.max_windows)  # as `run` reads
    policy = Policy.load(settings.policy)
    policy.check_labels(classifier.labels)
    failures = 0
    progress = Progress(sys.stderr, sys.stdin)
    users = Escalation(Metrics().users)  # no Redis: this process's state
    for first_line, chunk in _chunks(sys.stdin, max(args.batch, 1)):
        failures += decide_lines(
            chunk, reader, policy, sys.stdout, first_line=first_line, users=users
        )
        progress.update(len(chunk), sum(len(line.encode()) for line in chunk))
    progress.close()
    if failures:
        print(
            f"moderator: {failures} line(s) not decided (their 'error' on stdout names the "
            f"line); the input is {SCORE_INPUT}",
            file=sys.stderr,
        )
    return 1 if failures else 0


def _chunks(stream: IO[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """Runs of consecutive lines holding `size` non-blank ones (the last may hold fewer), each
    with the number of its first line, so that errors can name their line."""
    chunk: list[str] = []
    first = kept = 0
    for number, line in enumerate(stream, 1):
        first = first or number
        chunk.append(line)
        kept += bool(line.strip())
        if kept == size:
            yield first, chunk
            chunk, first, kept = [], 0, 0
    if kept:
        yield first, chunk


def score_input(line: str) -> dict[str, Any]:
    """One input line of `moderator score` as a JSON object with a string `text`, or
    InvalidRecord with the code a dead letter would get (records.py) and what was expected."""
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        why = f"not JSON ({exc.msg} at column {exc.colno})"
        raise InvalidRecord("invalid_json", f"{why}; expected {SCORE_INPUT}") from None
    if not isinstance(data, dict):
        why = f"JSON {json_type(data)}, not an object"
        raise InvalidRecord("not_object", f"{why}; expected {SCORE_INPUT}")
    try:
        required_string(data, "text")
    except InvalidRecord as exc:
        raise InvalidRecord(exc.code, f"{exc.message}; expected {SCORE_INPUT}") from None
    return data


def decide_lines(
    lines: list[str],
    reader: Reader,
    policy: Policy,
    out: IO[str],
    *,
    first_line: int = 1,
    users: Escalation | None = None,
) -> int:
    """Write one decision (or one error naming its line number) per non-blank line, in order;
    return the error count. `lines` are consecutive input lines from number `first_line`; with
    `users`, the policy's user rules apply to lines with a `user_id`."""
    rows: list[dict[str, object]] = []
    chats: list[ChatMessage | None] = []  # per decided row
    for number, line in enumerate(lines, first_line):
        if not line.strip():
            continue
        try:
            data = score_input(line)
        except InvalidRecord as exc:
            message = f"line {number}: {exc.message}"
            rows.append({"line": number, "error": {"code": exc.code, "message": message}})
            continue
        row: dict[str, object] = {
            k: data[k] for k in ("message_id", "channel_id", "user_id") if k in data
        }
        row["text"] = data["text"]
        rows.append(row)
        chats.append(_chat(data, number) if users is not None else None)
    decided = iter(_judged(reader, policy, [r for r in rows if "error" not in r], chats, users))
    for row in rows:
        if "error" not in row:
            judged, up = next(decided)
            ruling = judged.ruling
            row.update(
                action=up.action,
                reason=ruling.reason,
                severity=ruling.severity,
                scores={k: round(v, 4) for k, v in judged.scores.items()},
                model=reader.classifier.info.ident,
                policy=policy.ident,
                span=judged.span,
                truncated=judged.truncated,
                strikes=up.strikes,
                escalated=up.escalated,
            )
            if judged.language is not None:
                row["language"] = judged.language
        out.write(orjson.dumps(row).decode() + "\n")
    out.flush()
    return sum(1 for row in rows if "error" in row)


def _chat(data: dict[str, Any], number: int) -> ChatMessage | None:
    """A line with a string `user_id` as the message the user rules count, else None."""
    user = data.get("user_id")
    if not isinstance(user, str) or not user:
        return None
    sent = data.get("sent_at_ms")
    sent_at_ms = sent if type(sent) is int else int(time.time() * 1000)
    ids = [data.get(k) for k in ("message_id", "channel_id")]
    message_id = ids[0] if isinstance(ids[0], str) and ids[0] else f"line-{number}"
    channel_id = ids[1] if isinstance(ids[1], str) else ""
    return ChatMessage(message_id, channel_id, user, data["text"], sent_at_ms)


def _judged(
    reader: Reader,
    policy: Policy,
    rows: list[dict[str, object]],
    chats: list[ChatMessage | None],
    users: Escalation | None,
) -> list[tuple[Judged, Escalated]]:
    """Each row's decision, line after line as `run` would make it: the user rules before the
    model (muted, flood, spam, links), else the model and policy, then strikes and one step up
    the ladder. Every text is scored (offline, a line the rules decide costs only time)."""
    scored = decide_texts(reader, policy, [str(row["text"]) for row in rows])
    out = []
    for row, chat, judged in zip(rows, chats, scored, strict=True):
        if users is None or chat is None:
            out.append((judged, Escalated(judged.ruling.action, 0, False)))
            continue
        early = users.before_local([(chat, policy)])[0]
        if early is not None:
            judged = Judged(early, {}, (0, len(str(row["text"]))))
        out.append((judged, users.after_local([(chat, policy, judged.ruling)])[0]))
    return out
