"""Hostile inbound records: junk that must be dead-lettered, and nasty but valid chat.

Every record is keyed `h-<n>`; a dead letter keeps the key untouched and a valid message uses it
as its `message_id`, so each outcome is matched back to the case that made it. `expect` is the
set of dead-letter codes a junk case may get (arbitrary bytes can happen to be valid UTF-8, or
even a JSON number), or `{"decision"}` for valid chat.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

DECISION = "decision"
MIB = 1024 * 1024
ZALGO_MARKS = [chr(c) for c in range(0x0300, 0x036F)]

Maker = Callable[[str, random.Random], bytes | None]


def _msg(mid: str, text: Any = "gg", **changes: Any) -> dict[str, Any]:
    channel = f"hc-{int(mid.rsplit('-', 1)[1]) % 8}"
    value = {"message_id": mid, "channel_id": channel, "user_id": "u-hostile", "text": text,
             "sent_at_ms": int(time.time() * 1000)}  # fmt: skip
    value.update(changes)
    return value


def _json(mid: str, text: Any = "gg", **changes: Any) -> bytes:
    return orjson.dumps(_msg(mid, text, **changes))


def _zalgo(rng: random.Random, base: str = "he comes, gg wp") -> str:
    return "".join(ch + "".join(rng.choices(ZALGO_MARKS, k=rng.randint(3, 12))) for ch in base)


def _nested(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


@dataclass(frozen=True)
class HostileCase:
    name: str
    description: str
    expect: frozenset[str]
    make: Maker
    limit: int | None = None  # at most this many in one burst (heavy records)

    @property
    def valid(self) -> bool:
        return self.expect == frozenset({DECISION})


def _codes(*codes: str) -> frozenset[str]:
    return frozenset(codes)


def _random_bytes(mid: str, rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(1, 512))


JUNK: tuple[HostileCase, ...] = (
    HostileCase("random_bytes", "arbitrary bytes, 1-512 of them",
                _codes("not_utf8", "invalid_json", "not_object"), _random_bytes),
    HostileCase("empty_bytes", "a zero-length value", _codes("invalid_json"),
                lambda mid, rng: b""),
    HostileCase("tombstone", "no value at all (a tombstone)", _codes("empty_value"),
                lambda mid, rng: None),
    HostileCase("text_1mib", "a chat message whose text is 1 MiB",
                _codes("too_large"), lambda mid, rng: _json(mid, "a" * MIB), limit=5),
    HostileCase("json_nested_100k", "JSON nested 100,000 arrays deep",
                _codes("too_large", "invalid_json"),
                lambda mid, rng: _nested(100_000).encode(), limit=20),
    HostileCase("json_nested_5k", "JSON nested 5,000 arrays deep (past the parser's limit)",
                _codes("invalid_json"), lambda mid, rng: _nested(5000).encode()),
    HostileCase("text_nested_object", "`text` is a deeply nested object",
                _codes("wrong_type"),
                lambda mid, rng: _json(mid, orjson.loads(('{"a":' * 200) + "1" + "}" * 200))),
    HostileCase("text_number", "`text` is a number", _codes("wrong_type"),
                lambda mid, rng: _json(mid, 12345)),
    HostileCase("text_null", "`text` is null", _codes("wrong_type"),
                lambda mid, rng: _json(mid, None)),
    HostileCase("id_list", "`message_id` is a list", _codes("wrong_type"),
                lambda mid, rng: orjson.dumps({**_msg(mid), "message_id": [mid]})),
    HostileCase("user_bool", "`user_id` is true", _codes("wrong_type"),
                lambda mid, rng: _json(mid, user_id=True)),
    HostileCase("sent_at_string", "`sent_at_ms` is a string", _codes("wrong_type"),
                lambda mid, rng: _json(mid, sent_at_ms="yesterday")),
    HostileCase("sent_at_float", "`sent_at_ms` is 1.5", _codes("wrong_type"),
                lambda mid, rng: _json(mid, sent_at_ms=1.5)),
    HostileCase("sent_at_huge", "`sent_at_ms` is 10^30 (past 64 bits: parsed as a float)",
                _codes("wrong_type"),
                lambda mid, rng: _json(mid).replace(b'"sent_at_ms":', b'"sent_at_ms":1' + b"0" * 30
                                                    + b',"x":')),
    HostileCase("missing_text", "no `text`", _codes("missing_field"),
                lambda mid, rng: orjson.dumps({k: v for k, v in _msg(mid).items()
                                               if k != "text"})),
    HostileCase("empty_channel", "`channel_id` is empty", _codes("empty_field"),
                lambda mid, rng: _json(mid, channel_id="")),
    HostileCase("not_object", "a JSON array / string / number / null",
                _codes("not_object"),
                lambda mid, rng: rng.choice([b"[1,2,3]", b'"gg"', b"42", b"null", b"true"])),
    HostileCase("truncated_json", "JSON cut in the middle", _codes("invalid_json"),
                lambda mid, rng: _json(mid)[: rng.randint(1, 40)]),
    HostileCase("raw_nul_bytes", "NUL bytes between the JSON tokens", _codes("invalid_json"),
                lambda mid, rng: _json(mid).replace(b",", b",\x00")),
    HostileCase("lone_surrogate_escape", 'a lone surrogate escape "\\ud800" in `text`',
                _codes("invalid_json"),
                lambda mid, rng: _json(mid, "SURR").replace(b"SURR", b"a\\ud800b")),
    HostileCase("lone_surrogate_bytes", "a lone surrogate as raw bytes (ED A0 80)",
                _codes("not_utf8"),
                lambda mid, rng: _json(mid, "SURR").replace(b"SURR", b"a\xed\xa0\x80b")),
    HostileCase("overlong_utf8", "an overlong UTF-8 encoding of '/' (C0 AF)", _codes("not_utf8"),
                lambda mid, rng: _json(mid, "SURR").replace(b"SURR", b"..\xc0\xaf..")),
    HostileCase("latin1", "Latin-1 text, not UTF-8", _codes("not_utf8"),
                lambda mid, rng: _json(mid, "SURR").replace(b"SURR", "café".encode("latin-1"))),
    HostileCase("bom_prefixed", "a UTF-8 byte-order mark before the JSON", _codes("invalid_json"),
                lambda mid, rng: b"\xef\xbb\xbf" + _json(mid)),
)  # fmt: skip

VALID: tuple[HostileCase, ...] = (
    HostileCase("zalgo", "zalgo text (hundreds of combining marks)", _codes(DECISION),
                lambda mid, rng: _json(mid, _zalgo(rng))),
    HostileCase("rtl", "right-to-left text with RLO/PDF overrides", _codes(DECISION),
                lambda mid, rng: _json(mid, "\u202eغبي أنت\u202c שלום gg \u200fمرحبا")),
    HostileCase("nul_in_text", "NUL and control characters inside `text` (escaped)",
                _codes(DECISION), lambda mid, rng: _json(mid, "gg\x00wp\x07\x1b[31mred\x1b[0m")),
    HostileCase("format_and_shell", "format strings, a shell command and a path in `text`",
                _codes(DECISION),
                lambda mid, rng: _json(mid, "%s%n{0} $(rm -rf /) `id` ../../etc/passwd")),
    HostileCase("text_60kib", "a 60 KiB text (just under the record limit)", _codes(DECISION),
                lambda mid, rng: _json(mid, "spam " * 12_000), limit=20),
    HostileCase("emoji_wall", "4,000 emoji and ZWJ sequences", _codes(DECISION),
                lambda mid, rng: _json(mid, "👨‍👩‍👧‍👦🔥" * 800)),
    HostileCase("only_invisible", "only zero-width and format characters", _codes(DECISION),
                lambda mid, rng: _json(mid, "\u200b\u200c\u200d\u2060\ufeff")),
    HostileCase("extra_nested_field", "an unknown field nested 200 deep (ignored)",
                _codes(DECISION),
                lambda mid, rng: orjson.dumps({**_msg(mid),
                                               "extra": orjson.loads(_nested(200))})),
    HostileCase("duplicate_keys", 'duplicate keys (`"text"` twice)', _codes(DECISION),
                lambda mid, rng: _json(mid, "first").replace(b'"text":"first"',
                                                             b'"text":1,"text":"second"')),
    HostileCase("mixed_script", "homoglyphs: Cyrillic letters posing as Latin", _codes(DECISION),
                lambda mid, rng: _json(mid, "уоu аrе аn idiоt")),
)  # fmt: skip

CASES = {case.name: case for case in JUNK + VALID}


@dataclass(frozen=True)
class HostileRecord:
    key: bytes
    value: bytes | None
    case: str


def burst(junk: int, valid: int, *, seed: int = 5, start: int = 0) -> list[HostileRecord]:
    """`junk` junk records cycling through `JUNK` (heavy ones capped) with `valid` valid ones
    spread evenly among them. Keys are `h-<n>` from `start`."""
    rng = random.Random(seed)
    records: list[HostileRecord] = []
    used: dict[str, int] = {}
    junk_cases = _cycle(JUNK, used)
    valid_cases = _cycle(VALID, used)
    every = max(1, (junk + valid) // max(valid, 1))
    n = start
    made_junk = made_valid = 0
    while made_junk < junk or made_valid < valid:
        want_valid = made_valid < valid and (made_junk >= junk or (n - start) % every == every - 1)
        case = next(valid_cases) if want_valid else next(junk_cases)
        mid = f"h-{n}"
        records.append(HostileRecord(mid.encode(), case.make(mid, rng), case.name))
        made_valid += want_valid
        made_junk += not want_valid
        n += 1
    return records


def _cycle(cases: tuple[HostileCase, ...], used: dict[str, int]) -> Iterator[HostileCase]:
    while True:
        for case in cases:
            if case.limit is not None and used.get(case.name, 0) >= case.limit:
                continue
            used[case.name] = used.get(case.name, 0) + 1
            yield case


@dataclass
class CaseOutcome:
    """What the records of one case got."""

    case: HostileCase
    sent: int = 0
    outcomes: dict[str, int] | None = None

    @property
    def ok(self) -> bool:
        got = self.outcomes or {}
        return sum(got.values()) == self.sent and set(got) <= self.case.expect


def judge(
    records: list[HostileRecord], dead: dict[bytes, str], decided: set[str]
) -> list[CaseOutcome]:
    """Per case: how many were sent and what each got (a dead-letter code, `decision`,
    or `nothing`)."""
    table: dict[str, CaseOutcome] = {}
    for rec in records:
        row = table.setdefault(rec.case, CaseOutcome(CASES[rec.case], outcomes={}))
        row.sent += 1
        assert row.outcomes is not None
        if rec.key in dead:
            got = dead[rec.key]
        elif rec.key.decode() in decided:
            got = DECISION
        else:
            got = "nothing"
        row.outcomes[got] = row.outcomes.get(got, 0) + 1
    order = {name: i for i, name in enumerate(CASES)}
    return sorted(table.values(), key=lambda row: order[row.case.name])
