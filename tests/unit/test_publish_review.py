"""A review decision's two records: its input offset moves only once the decision and its review
record are both acknowledged, whichever comes first, and a failed review record is re-sent."""

from __future__ import annotations

import pytest
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from moderator.kafka.ledger import OffsetLedger
from moderator.kafka.publisher import Fetched, Publisher
from moderator.metrics import Metrics
from moderator.records import Outcome
from moderator.tasks import Supervisor
from tests.unit.test_publish_retry import DLQ, IN, OUT, Producer, Record, until

REVIEW = "chat.review"
TP = TopicPartition(IN, 0)


async def publish_review(producer: Producer, ledger: OffsetLedger, publisher: Publisher) -> None:
    ledger.assign([TP])
    entry = ledger.track(TP, 7)
    outcome = Outcome(b"c-1", b'{"action":"review"}', [("traceparent", b"t")], action="review",
                      review=b'{"message_id":"m-7"}', review_key=b"m-7")  # fmt: skip
    await publisher.publish([Fetched(entry, Record(IN, 0, 7))], [outcome])


@pytest.mark.parametrize("decision_first", [True, False])
async def test_the_offset_waits_for_the_decision_and_its_review_record(
    decision_first: bool,
) -> None:
    producer, ledger, metrics, failures = Producer(), OffsetLedger(), Metrics(), []
    supervisor = Supervisor("the test", on_failure=failures.append)
    publisher = Publisher(producer, out_topic=OUT, dlq_topic=DLQ, review_topic=REVIEW,
                          publish_attempts=3, metrics=metrics.kafka, on_acked=ledger.ack,
                          supervisor=supervisor, backoff_s=(0.0,))  # fmt: skip
    await publish_review(producer, ledger, publisher)
    decision, review = producer.sends
    assert (decision.topic, review.topic) == (OUT, REVIEW), "the review record right after"
    assert (review.outcome.key, review.outcome.value) == (b"m-7", b'{"message_id":"m-7"}')
    assert review.outcome.headers == [("traceparent", b"t")]
    first, second = (decision, review) if decision_first else (review, decision)
    first.future.set_result(None)
    sample = metrics.registry.get_sample_value
    counted = (
        ("moderator_decisions_total", {"action": "review"})
        if decision_first
        else ("moderator_review_records_total", {})
    )
    await until(lambda: sample(*counted) == 1, "the first ack lands")
    assert ledger.committable(TP) is None
    if second is review:  # a failed review record is re-sent, and the offset still waits
        review.future.set_exception(KafkaTimeoutError())
        await until(lambda: len(producer.sends) == 3, "the review record is re-sent")
        second = producer.sends[-1]
        assert second.topic == REVIEW
        assert ledger.committable(TP) is None
    second.future.set_result(None)
    await until(lambda: ledger.committable(TP) == 8, "the offset moves past both")
    assert sample("moderator_review_records_total") == 1
    assert sample("moderator_decisions_total", {"action": "review"}) == 1
    await publisher.stop()
    assert not failures
