"""The demo's shadow run against the real broker, with the demo's own candidate beside the
shipped model: the summary counts every message both models decided, and the disagreement it
shows is one the shadow topic holds, with its text found on the chat topic past a malformed
record."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from prometheus_client import generate_latest

from devstack import demo_shadow
from devstack.child import Samples
from moderator.config import Settings
from moderator.decide.classifier import Classifier, ModelInfo
from moderator.service import Moderator
from tests.integration.kafka_io import chat, consume, distinct_ids, produce
from tests.integration.test_shadow import TEXTS, sum_of
from tests.waiting import eventually

pytestmark = pytest.mark.integration

N = 2 * len(TEXTS)


async def test_the_demo_shows_the_agreement_and_one_disagreement_with_its_text(
    settings: Settings, classifier: Classifier, tmp_path: Path
) -> None:
    args, named = demo_shadow.shadow_args(tmp_path, {})
    candidate = ModelInfo.load(Path(args[1])).ident
    shadow_topic = f"chat.shadow.{settings.group_id}"
    s = settings.replace(shadow_model=Path(args[1]), shadow_topic=shadow_topic, shadow_queue=N)
    inputs = [chat(i, TEXTS[i % len(TEXTS)], channels=3) for i in range(N)]
    texts = {orjson.loads(v)["message_id"]: orjson.loads(v)["text"] for _, v in inputs}
    async with Moderator(s, classifier=classifier) as service:
        await service.wait_ready(30)
        registry = service.metrics.registry
        await produce(s.kafka_bootstrap, s.in_topic, [(b"c-0", b"{not json"), *inputs])
        await consume(s.kafka_bootstrap, s.out_topic, until=distinct_ids(N))

        def compared_and_recorded() -> bool:
            sent = sum_of(registry, "moderator_shadow_records_total", result="sent")
            return sum_of(registry, "moderator_shadow_decisions_total") == N and sent == sum_of(
                registry, "moderator_shadow_disagreements_total"
            )

        await eventually(compared_and_recorded, "every message compared, each disagreement sent")
        disagreed = int(sum_of(registry, "moderator_shadow_disagreements_total"))
        samples = Samples(generate_latest(registry).decode())
        shown = await demo_shadow.one_disagreement(s.kafka_bootstrap, shadow_topic, s.in_topic)

    assert 0 < disagreed < N, "the data holds lines the two models decide alike and otherwise"
    assert shown is not None
    assert shown.text == texts[shown.record["message_id"]]
    assert shown.record["primary"]["top"], "the model read it"
    assert shown.record["shadow"]["top"], "the model read it"
    text = demo_shadow.report(samples, named, shown, shadow_topic)
    assert (
        f"compared        {N} messages both models decided (skipped 0): agreed {N - disagreed} "
        in text
    )
    assert f"{disagreed} sent to {shadow_topic} (failed 0)" in text
    assert repr(shown.text) in text
    primary, shadow = text.splitlines()[-2:]
    assert primary.split()[:2] == ["primary", classifier.info.ident]
    assert shadow.split()[:2] == ["shadow", candidate]
    assert shadow.split()[2].rstrip(",;") == shown.record["shadow"]["action"]
    assert primary.split()[2].rstrip(",;") == shown.record["primary"]["action"]
