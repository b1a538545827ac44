"""Escalation by user: the policies' `[users]` rules applied once per batch before the screen
and once after the decisions (`escalation`), on the users' state in Redis or in this process
(`state`).

May import: the base, kafka/, policy/, decide/ and users/ itself.
"""
