"""Benign sentences in the frames that the hostile identity templates use (training only).

The template corpus writes "being {group} is disgusting", "{group} are a disease", "all
{group} should leave", but almost never a kind sentence in those frames, so a model learns the
frame (an identity word, then "is"/"are") instead of the hostility, and blocks "being deaf is
fine". Dixon et al. 2018 ("Measuring and Mitigating Unintended Bias in Text Classification")
mitigate exactly this by adding non-toxic text that uses identity terms, until a term is no
evidence for either label. These lines do that for our frames. They are written here, filled
from the training word lists only (the synthetic held-out words stay unseen), and never equal a
sentence of the identity probe (`models/lines/identity.py`), which stays a test.
"""

from __future__ import annotations

import random

from models.lines import corpus, identity
from moderator.normalize import normalize_text

# Each mirrors a hostile identity frame of models/lines/templates.py with a kind or neutral ending.
FRAMES = (
    "being {group_adj} is {kind}",
    "being {group_adj} is {kind}, {ending}",
    "honestly being {group_adj} is {kind}",
    "{group} are {kind_plural}",
    "all {group} are {kind_plural}",
    "honestly {group} are {kind_plural}",
    "{group_adj} people are {kind_plural}",
    "{group_adj} {person}s are {kind_plural}",
    "i love {group}",
    "i have nothing against {group}, {ending}",
    "we need more {group_adj} streamers",
    "the world is better with {group} in it",
    "{group} should be allowed to play whatever they want",
    "of course the {group_adj} {person} is good at the game, they practice a lot",
    "typical {group_adj} {person} carrying the lobby {laugh}",
    "i can tell you're {group_adj} from your accent, where are you from?",
    "i'd always team with {group}, they {kind_verb}",
    "{group} are welcome to join our guild",
    "never met {group} who weren't nice to me",
    "being {group_adj} is not a mental illness",
    "being {group_adj} is not a choice and not a problem",
    "{group} are not a problem, {ending}",
)
WORDS = {
    "kind": [
        "nothing to be ashamed of",
        "just part of who i am",
        "fine",
        "completely okay",
        "a big part of my life",
        "not something anyone should hide",
        "who i am",
        "pretty cool actually",
        "not a big deal",
        "something i'm proud of",
        "normal for me",
        "hard sometimes but i love my life",
    ],
    "kind_plural": [
        "people like everyone else",
        "part of this community",
        "some of the best players i know",
        "just regular gamers",
        "welcome in our discord",
        "so supportive in this chat",
        "my favourite people",
        "allowed to be here",
        "human beings",
        "great neighbours",
        "not a disease",
        "not the problem",
    ],
    "kind_verb": ["are great", "always communicate", "carry hard", "are so chill"],
    "ending": [
        "stop making it weird",
        "leave them alone",
        "why would anyone care",
        "let people live",
        "this is a chat about games",
        "get over it",
    ],
}


def lines(n: int = 1500, seed: int = 20261123) -> list[tuple[str, tuple[float, ...]]]:
    """n benign lines (all-zero targets), chat-styled like the template corpus."""
    rng = random.Random(seed)
    words = {**corpus.split_words(heldout=False), **WORDS}
    probe = {normalize_text(p.text).lower() for p in identity.probe()}
    zero = tuple(0.0 for _ in corpus.LABELS)
    out: list[tuple[str, tuple[float, ...]]] = []
    while len(out) < n:
        text = corpus.chatify(corpus.fill(rng.choice(FRAMES), words, rng), rng, words)
        if normalize_text(text).lower() not in probe and not corpus.VULGAR.search(text.lower()):
            out.append((text, zero))
    return out
