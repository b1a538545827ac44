"""The operators' commands beside `moderator run`: `moderator policy` and `moderator override`
(their topics read and written outside any running moderator), `moderator verdicts export`
(the review and verdict topics joined into training lines) and `moderator score` (JSON lines
on stdin to decisions, with its progress bar).

May import: the base and every wing. Only the command line (moderator/cli.py) imports it.
"""
