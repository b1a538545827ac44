"""Chat lines the shipped model holds for review: friendly chat in languages it does not read.

The language gate (moderator/decide/language.py) names each as its language, and the default policy
sends such text to `review` (reason `unsupported_language:<code>`), whatever its scores: checked
with `moderator score` on the first 400 lines (every one `review`) and by
tests/unit/test_loadgen_held.py. Each line is new (the template's number counts up), so a
moderator's verdict on one, which becomes an override for its text, never decides another.
"""

from __future__ import annotations

TEMPLATES = (
    "buenas noches a todos, gracias por el stream número {n}",
    "qué partida tan buena, mañana jugamos la ronda {n}",
    "bonne nuit tout le monde, merci pour le live numéro {n}",
    "quelle partie incroyable, on recommence la manche {n} demain",
    "guten abend zusammen, danke für den stream nummer {n}",
    "das war ein wirklich spannendes spiel, runde {n} kommt morgen",
    "buonanotte a tutti, grazie per la diretta numero {n}",
    "ciao ragazzi, che bella partita stasera, turno {n}",
    "goede avond iedereen, bedankt voor de stream nummer {n}",
    "dobranoc wszystkim, dzięki za stream numer {n}",
)


def held_text(n: int) -> str:
    """The `n`-th line (from 0): a different text for every `n`."""
    template = TEMPLATES[n % len(TEMPLATES)]
    return template.format(n=n // len(TEMPLATES) + 1)
