"""The broker's side of the loop: Kafka clients started and stopped within bounds, the topics,
the input's intake and its offset ledger, the publisher and what replaces a record the broker
refuses, and a compacted topic read as a table (the policies and the overrides follow one).

May import: the base (moderator/*.py below the pipeline) and kafka/ itself. Nothing here knows
what a policy, a score or a held message is.
"""
