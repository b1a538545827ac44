"""Chat-like traffic: what each message says, who sends it, and the malformed records mixed in.

The mix follows the shape of real chat: most lines are one to eight words, with a long tail up to a
few hundred characters; a configurable share repeats an earlier line exactly or nearly (spam,
copy-paste, "gg", case, punctuation and elongation variants); a configurable share is toxic.

Lines that are not repeats are made new: when the corpus line was already sent in this run it is
turned into a reply ("@name ...") or joined with another line. The repeat share is then what
`dup_ratio` says, not an accident of the corpus being small, which matters when measuring a cache.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

import orjson

from loadgen.corpus import Corpus, default_corpus
from loadgen.held import held_text

# Share of benign lines by length, before repeats: (min words, max words or None, weight).
LENGTH_MIX: tuple[tuple[int, int | None, float], ...] = (
    (1, 3, 0.50),
    (4, 8, 0.33),
    (9, None, 0.12),
)
LONG_TAIL_SHARE = 0.05  # lines from long.txt (one to a few hundred characters)
EXACT_REPEAT_SHARE = 0.6  # of repeats; the rest are near repeats
HOT_POOL_SIZE = 24  # benign lines spammed over and over in one run ("gg", "KEKW", emote walls)
RECENT_POOL_SIZE = 256
USERS = 5000
EMOJI = ("😂", "🔥", "❤️", "💀", "👀", "🙏", "😭", "👍", "🎉", "😎")
SUFFIXES = ("!", "!!", "!!!", "?", "??", ".", "...", " lol", " xD")
NAME_PARTS_A = ("dark", "pixel", "lazy", "tiny", "mega", "salty", "happy", "frost", "turbo")
NAME_PARTS_B = ("fox", "gamer", "wolf", "panda", "ninja", "cat", "viper", "owl", "knight")


class Kind(StrEnum):
    """What a produced record is."""

    BENIGN = "benign"
    TOXIC = "toxic"
    HELD = "held"  # a line the shipped model holds for review (loadgen/held.py)
    MALFORMED = "malformed"


class Malformation(StrEnum):
    """How a malformed record is broken. Each carries the record's id where it can."""

    INVALID_JSON = "invalid_json"
    NOT_UTF8 = "not_utf8"
    NOT_OBJECT = "not_object"
    MISSING_TEXT = "missing_text"
    MISSING_ID = "missing_id"
    EMPTY_USER = "empty_user"
    TEXT_NOT_STRING = "text_not_string"
    CHANNEL_NOT_STRING = "channel_not_string"


@dataclass(frozen=True, slots=True)
class OutRecord:
    """One record to produce: the Kafka key and value, and what the generator knows about it."""

    message_id: str
    key: bytes
    value: bytes
    kind: Kind
    repeat: bool = False
    malformation: Malformation | None = None


def vary(text: str, rng: random.Random) -> str:
    """A near repeat of `text`: the same line typed again a little differently."""
    choice = rng.randrange(7)
    if choice == 0:
        return text.upper()
    if choice == 1:
        return text.lower() if text != text.lower() else text.capitalize()
    if choice == 2:
        return text.rstrip("!?.") + rng.choice(SUFFIXES)
    if choice == 3:  # elongate the last letter: "gg" -> "gggg", "lol" -> "lolll"
        for i in range(len(text) - 1, -1, -1):
            if text[i].isalpha():
                return text[: i + 1] + text[i] * rng.randint(1, 4) + text[i + 1 :]
        return text + text[-1:] * 2
    if choice == 4:
        return f"{text} {rng.choice(EMOJI)}"
    if choice == 5:
        return f"{text} {text}" if len(text) < 40 else f"{text}  "
    return f" {text}"


class TrafficGenerator:
    """Deterministic for a seed: the same seed gives the same texts, users and channels.

    `run_id` goes into every message id (`<run_id>-<n>`, malformed ones `<run_id>-bad-<n>`), so
    decisions and dead letters of this run can be told apart from any other.
    """

    def __init__(
        self,
        *,
        run_id: str,
        seed: int | None = None,
        dup_ratio: float = 0.3,
        toxic_ratio: float = 0.05,
        malformed_ratio: float = 0.0,
        held_ratio: float = 0.0,
        channels: int = 16,
        corpus: Corpus | None = None,
    ) -> None:
        for name, ratio in (
            ("dup_ratio", dup_ratio),
            ("toxic_ratio", toxic_ratio),
            ("malformed_ratio", malformed_ratio),
            ("held_ratio", held_ratio),
        ):
            if not 0.0 <= ratio <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {ratio}")
        if channels < 1:
            raise ValueError(f"channels must be at least 1, got {channels}")
        self.run_id = run_id
        self.dup_ratio = dup_ratio
        self.toxic_ratio = toxic_ratio
        self.malformed_ratio = malformed_ratio
        self.held_ratio = held_ratio
        self._rng = random.Random(seed)
        self._corpus = corpus or default_corpus()
        self._buckets = self._length_buckets(self._corpus.benign)
        self._bucket_weights = [weight for _, weight in self._buckets]
        self._seq = itertools.count()
        self._bad_seq = itertools.count()
        self._novel_seq = itertools.count()
        self._held_seq = itertools.count()
        self._seen: set[str] = set()
        self._recent: dict[Kind, deque[str]] = {
            Kind.BENIGN: deque(maxlen=RECENT_POOL_SIZE),
            Kind.TOXIC: deque(maxlen=RECENT_POOL_SIZE),
        }
        short = [line for line in self._corpus.benign if len(line.split()) <= 3]
        hot = self._rng.sample(short, min(HOT_POOL_SIZE - 1, len(short)))
        hot.append(self._rng.choice(self._corpus.long))  # one copy-pasta goes round too
        self._hot = hot
        # Zipf-like popularity: a few channels, users and hot lines carry most of the traffic.
        self._channel_cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(channels)))
        self._user_cum = list(itertools.accumulate(1.0 / (i + 1) ** 0.8 for i in range(USERS)))
        self._hot_cum = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(hot))))
        self._channels = channels

    @staticmethod
    def _length_buckets(lines: tuple[str, ...]) -> list[tuple[tuple[str, ...], float]]:
        buckets = []
        for low, high, weight in LENGTH_MIX:
            members = tuple(
                line
                for line in lines
                if len(line.split()) >= low and (high is None or len(line.split()) <= high)
            )
            if members:
                buckets.append((members, weight))
        return buckets

    def _benign_line(self) -> str:
        if self._rng.random() < LONG_TAIL_SHARE:
            return self._rng.choice(self._corpus.long)
        ((lines, _),) = self._rng.choices(self._buckets, weights=self._bucket_weights)
        return self._rng.choice(lines)

    def _mention(self) -> str:
        rng = self._rng
        return f"@{rng.choice(NAME_PARTS_A)}{rng.choice(NAME_PARTS_B)}{rng.randrange(10_000)}"

    def _make_new(self, line: str, kind: Kind) -> str:
        """`line`, or a reply or combination built on it that this run has not sent yet."""
        text = line
        for _ in range(8):
            if text not in self._seen:
                return text
            roll = self._rng.random()
            if roll < 0.6 or kind is Kind.TOXIC:
                text = f"{self._mention()} {line}"
            elif roll < 0.85:
                text = f"{line} {self._benign_line()}"
            else:
                text = f"{line} {self._rng.choice(EMOJI)}{self._rng.choice(EMOJI)}"
        return f"{self._mention()} {line} {next(self._novel_seq)}"

    def _repeat(self, kind: Kind) -> str:
        recent = self._recent[kind]
        if kind is Kind.TOXIC:
            base = self._rng.choice(recent) if recent else self._rng.choice(self._corpus.toxic)
        elif recent and self._rng.random() < 0.4:
            base = self._rng.choice(recent)
        else:
            (base,) = self._rng.choices(self._hot, cum_weights=self._hot_cum)
        return base if self._rng.random() < EXACT_REPEAT_SHARE else vary(base, self._rng)

    def next_text(self) -> tuple[str, Kind, bool]:
        """The next chat line, its kind, and whether it repeats an earlier line. A held line is
        always new and never repeated: each is one message for a moderator to judge."""
        # Drawn only when asked for, so a run without held lines keeps its seed's traffic.
        if self.held_ratio and self._rng.random() < self.held_ratio:
            return held_text(next(self._held_seq)), Kind.HELD, False
        kind = Kind.TOXIC if self._rng.random() < self.toxic_ratio else Kind.BENIGN
        repeat = self._rng.random() < self.dup_ratio
        if repeat:
            text = self._repeat(kind)
        else:
            line = (
                self._rng.choice(self._corpus.toxic) if kind is Kind.TOXIC else self._benign_line()
            )
            text = self._make_new(line, kind)
            self._recent[kind].append(text)
        self._seen.add(text)
        return text, kind, repeat

    def next_record(self, sent_at_ms: int) -> OutRecord:
        """The next record to produce, stamped with its scheduled send time."""
        if self.malformed_ratio and self._rng.random() < self.malformed_ratio:
            return self._malformed(sent_at_ms)
        text, kind, repeat = self.next_text()
        (channel,) = self._rng.choices(range(self._channels), cum_weights=self._channel_cum)
        (user,) = self._rng.choices(range(USERS), cum_weights=self._user_cum)
        message_id = f"{self.run_id}-{next(self._seq)}"
        channel_id = f"c-{channel}"
        value = orjson.dumps(
            {
                "message_id": message_id,
                "channel_id": channel_id,
                "user_id": f"u-{user}",
                "text": text,
                "sent_at_ms": sent_at_ms,
            }
        )
        return OutRecord(message_id, channel_id.encode(), value, kind, repeat)

    def _malformed(self, sent_at_ms: int) -> OutRecord:
        bad_id = f"{self.run_id}-bad-{next(self._bad_seq)}"
        how = self._rng.choice(list(Malformation))
        good = {
            "message_id": bad_id,
            "channel_id": "c-0",
            "user_id": "u-0",
            "text": "gg",
            "sent_at_ms": sent_at_ms,
        }
        value: bytes
        if how is Malformation.INVALID_JSON:
            value = orjson.dumps(good)[:-12]
        elif how is Malformation.NOT_UTF8:
            value = orjson.dumps(good).replace(b'"gg"', b'"g\xff\xfeg"')
        elif how is Malformation.NOT_OBJECT:
            value = orjson.dumps([bad_id, "c-0", "u-0", "gg"])
        elif how is Malformation.MISSING_TEXT:
            value = orjson.dumps({k: v for k, v in good.items() if k != "text"})
        elif how is Malformation.MISSING_ID:
            # No message_id: the id rides in an unknown field (and the key) to match the DLQ.
            value = orjson.dumps({**{k: v for k, v in good.items() if k != "message_id"},
                                  "trace": bad_id})  # fmt: skip
        elif how is Malformation.EMPTY_USER:
            value = orjson.dumps({**good, "user_id": ""})
        elif how is Malformation.TEXT_NOT_STRING:
            value = orjson.dumps({**good, "text": 12345})
        else:
            value = orjson.dumps({**good, "channel_id": 7})
        # The key is the id too: the dead letter keeps the original key untouched.
        return OutRecord(bad_id, bad_id.encode(), value, Kind.MALFORMED, malformation=how)
