"""The promotion scenario's reading of the ledger: which model made each decision, per partition
in offset order and for the messages sent once both instances switched."""

from __future__ import annotations

import orjson

from chaos.ledger import Ledger
from chaos.promotion import first_models_by_partition, models_sent_since, switched_back

OLD, NEW = "chat-minilm@1", "chat-minilm-candidate@1"


def sent(lg: Ledger, n: int, *, partition: int, offset: int, at_ms: int) -> None:
    value = {"message_id": f"m-{n}", "channel_id": f"c-{partition}", "user_id": "u",
             "text": "gg", "sent_at_ms": at_ms}  # fmt: skip
    lg.on_input(orjson.dumps(value), partition, offset)


def decided(lg: Ledger, n: int, model: str, at_ms: float) -> None:
    decision = {"message_id": f"m-{n}", "action": "allow", "model": model}
    lg.on_decision(orjson.dumps(decision), at_ms)


def test_each_partitions_first_decisions_are_read_in_offset_order_not_arrival_order() -> None:
    lg = Ledger()
    for n, (partition, offset) in enumerate([(0, 0), (0, 1), (1, 0), (0, 2), (1, 1)]):
        sent(lg, n, partition=partition, offset=offset, at_ms=1000 + n)
    decided(lg, 3, NEW, 2000)  # arrives first, but is the partition's last
    decided(lg, 0, OLD, 2001)
    decided(lg, 1, OLD, 2002)
    decided(lg, 1, NEW, 2003)  # a repeat (redelivered after a kill): not the first decision
    decided(lg, 2, OLD, 2004)
    decided(lg, 4, NEW, 2005)
    assert lg.models["m-1"] == [OLD, NEW]
    assert first_models_by_partition(lg) == {0: [OLD, OLD, NEW], 1: [OLD, NEW]}


def test_a_partition_switched_back_only_when_another_model_decides_after_the_promoted_one() -> None:
    assert not switched_back([OLD, OLD, NEW, NEW], NEW)
    assert not switched_back([OLD, OLD], NEW)  # never switched: another check's business
    assert switched_back([OLD, NEW, OLD, NEW], NEW)
    assert switched_back([NEW, OLD], NEW)


def test_every_decision_of_the_messages_sent_since_a_moment_counts_repeats_included() -> None:
    lg = Ledger()
    for n in range(4):
        sent(lg, n, partition=0, offset=n, at_ms=1000 * n)
    decided(lg, 0, OLD, 5000)
    decided(lg, 1, OLD, 5001)
    decided(lg, 2, NEW, 5002)
    decided(lg, 2, OLD, 5003)  # a repeat by the old model still counts against the switch
    decided(lg, 3, NEW, 5004)
    assert models_sent_since(lg, 2000) == {NEW: 2, OLD: 1}
    assert models_sent_since(lg, 1000) == {NEW: 2, OLD: 2}
    assert models_sent_since(lg, 9000) == {}
