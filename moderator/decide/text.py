"""One message's text in the forms the steps read, each made once, when a step first asks for it.

The pipeline makes one `Text` per message where its record is parsed and hands it to every
step, so no step normalises the text again: the model, the language gate and the windows read
`normalized` (normalize.normalize_text, the model's input), the overrides look up `digest`, the
users' repeat rule counts `repeat_key`, and a policy's deny terms and allow phrases match
`words` (terms.words: each word's skeleton with its span in `raw`). A form no step asks for is
never made: a message a mute decides is not normalised, an empty override book hashes nothing,
a policy without terms makes no skeleton. Immutable: a step that changes the text (a policy's
allowed phrases blanked out) makes a new `Text`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from moderator.normalize import normalize_text
from moderator.policy import terms


@dataclass(frozen=True)
class Text:
    """A chat line as received (`raw`; spans and offsets count its characters)."""

    raw: str

    @cached_property
    def normalized(self) -> str:
        """What the model reads: `normalize_text(raw)`."""
        return normalize_text(self.raw)

    @cached_property
    def digest(self) -> str:
        """sha256 hex of the normalised text: the key overrides are written under
        (moderator/review/overrides.py), so a change here orphans every override."""
        return hashlib.sha256(self.normalized.encode("utf-8")).hexdigest()

    @cached_property
    def repeat_key(self) -> str:
        """What the users' repeat rule counts ("" for a text with no letter or digit, which
        repeats nothing): case, spacing, punctuation and look-alike letters do not make a text
        new."""
        folded = "".join(ch for ch in self.normalized.casefold() if ch.isalnum())
        return hashlib.blake2b(folded.encode(), digest_size=16).hexdigest() if folded else ""

    @cached_property
    def words(self) -> tuple[terms.Word, ...]:
        """The words deny terms and allow phrases are matched against (`terms.words`)."""
        return tuple(terms.words(self.raw))
