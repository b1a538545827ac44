"""The load generator runs on the same loop choice as the moderator (uvloop when installed)."""

from moderator.loop import run

__all__ = ["run"]
