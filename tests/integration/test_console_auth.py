"""The console's identity against the real broker and Redis: a `moderator console` process in the
proxy mode (the ID tokens of a throw-away provider verified against its pinned JWKS), asked the
way a client inside the cluster could ask it. A forged header or token decides nothing: the
verdict topic, read back with confluent-kafka, holds only the verified moderator's verdict."""

from __future__ import annotations

import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any
from urllib.error import HTTPError

import orjson
import pytest

from devstack.embedded import EmbeddedKafka, EmbeddedRedis
from moderator import loop
from moderator.kafka.topics import ensure_topics
from tests.integration.console_browser import (
    Topics,
    console_process,
    produce,
    read_until,
    review_record,
    until,
)
from tests.oidc import AUDIENCE, ISSUER, Provider, bearer, jwks

pytestmark = pytest.mark.integration


class Browser:
    """A client with its own cookie jar (the console's session, hence its CSRF token)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def get(self, path: str) -> Any:
        with self.opener.open(self.url + path, timeout=10) as reply:
            return orjson.loads(reply.read())

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> int:
        headers = {"Content-Type": "application/json", **headers}
        data = orjson.dumps(body)
        request = urllib.request.Request(self.url + path, data, headers, method="POST")
        try:
            with self.opener.open(request, timeout=10) as reply:
                return int(reply.status)
        except HTTPError as refused:
            return refused.code


def test_a_forged_header_or_token_is_refused_and_nothing_reaches_the_verdict_topic(
    kafka: EmbeddedKafka, redis_server: EmbeddedRedis, tmp_path: Path
) -> None:
    topics = Topics.fresh()
    loop.run(ensure_topics(kafka.bootstrap, {topics.review: 1, topics.verdicts: 1,
                                             topics.decisions: 1}))  # fmt: skip
    idp = Provider()
    proxy_mode = ["--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE,
                  "--oidc-key-file", str(jwks(tmp_path / "jwks.json", idp))]  # fmt: skip
    with console_process(
        kafka.bootstrap, redis_server.url, topics, tmp_path, *proxy_mode, grace_s=0
    ) as url:
        produce(kafka.bootstrap, topics.review, [review_record("m-1", "I know where you live")])
        client = Browser(url)
        csrf = client.get("/api/session")["csrf"]
        carol = {**bearer(idp.token("carol@example.com")), "X-CSRF-Token": csrf}
        claim = {"message_id": "m-1"}
        # 404 until the console has read the held message; then free it again for anyone.
        until(lambda: client.post("/api/claim", claim, carol) == 200, "the console holds m-1")
        assert client.post("/api/claim", {**claim, "release": True}, carol) == 200
        block = {"message_id": "m-1", "verdict": "block"}
        mallory = Provider(kid=idp.kid)
        for forged in (
            {"X-Forwarded-Email": "mallory@evil"},
            bearer(mallory.token("mallory@evil")),  # her own key under the provider's kid
            bearer(mallory.token("carol@example.com")),
            bearer(idp.token("carol@example.com", exp=1)),  # expired long ago
            bearer(idp.token("carol@example.com", aud="another-app")),
        ):
            assert client.post("/api/verdict", block, {**forged, "X-CSRF-Token": csrf}) == 401
        no_csrf = {k: v for k, v in carol.items() if k != "X-CSRF-Token"}
        assert client.post("/api/verdict", block, no_csrf) == 403
        allow = {"message_id": "m-1", "verdict": "allow"}
        assert client.post("/api/verdict", allow, carol) == 200
    # One partition, one producer: a forged verdict, had one gone out, would come first.
    verdicts = read_until(kafka.bootstrap, topics.verdicts, lambda seen: len(seen) >= 1)
    assert [(v["moderator_id"], v["verdict"]) for v in verdicts] == [("carol@example.com", "allow")]
