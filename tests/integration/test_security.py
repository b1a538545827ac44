"""Security through configuration, against real servers: Kafka over TLS, SASL/SCRAM, Redis with
a password over TLS, secrets kept out of logs, metrics and errors, an endpoint that serves only
its three paths.

What the broker allows: Tansu 0.6.0 serves no TLS of its own (see `tls.py`; stunnel terminates
it), its SASL offers SCRAM but not PLAIN, and with in-memory storage no SCRAM user can be created
once authentication is on (creating one needs an authenticated connection). So SCRAM is tested
to the broker's verdict on our credentials, not to a successful login; PLAIN is not tested.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote
from urllib.request import urlopen

import orjson
import pytest
import redis

from devstack.child import ModeratorChild, moderator_env
from devstack.embedded import EmbeddedKafka, EmbeddedRedis, free_port
from moderator.config import Settings
from moderator.decide.cache import KEY_PREFIX
from moderator.decide.classifier import Classifier
from moderator.errors import KafkaConnectError
from moderator.kafka.topics import ensure_topics
from moderator.policy.rules import ALLOW
from moderator.redaction import forms
from moderator.service import Moderator
from tests.integration.kafka_io import chat, consume, decisions_by_id, distinct_ids, produce
from tests.integration.tls import Pki, TlsTerminator, make_pki

pytestmark = pytest.mark.integration

# Distinctive, so a leak anywhere is found by search; with characters that URLs, repr() and
# UTF-8 spell differently, so a leak in any of those spellings is found too.
SECRET = f"s3cr3t+{uuid.uuid4().hex}/ä"
IN_URL = quote(SECRET, safe="")


def leaks(text: str, secret: str = SECRET) -> list[str]:
    """The spellings of `secret` found in `text`."""
    return sorted(form for form in forms(secret) if form in text)


MARK = f"chat-text-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_kafka(pki: Pki) -> Iterator[EmbeddedKafka]:
    """Tansu reached only through stunnel: clients speak TLS to the advertised port."""
    tls_port = free_port()
    broker = EmbeddedKafka(advertise_port=tls_port)
    with broker, TlsTerminator(upstream_port=broker.port, tls=pki.server, port=tls_port):
        yield broker


@pytest.fixture(scope="module")
def mtls_kafka(pki: Pki) -> Iterator[EmbeddedKafka]:
    """As `tls_kafka`, but the terminator lets in only clients with a certificate of our CA."""
    tls_port = free_port()
    broker = EmbeddedKafka(advertise_port=tls_port)
    terminator = TlsTerminator(broker.port, pki.server, tls_port, require_client_cert=True)
    with broker, terminator:
        yield broker


@pytest.fixture(scope="module")
def tls_redis(pki: Pki) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(password=SECRET, tls=pki.server) as server:
        yield server


@pytest.fixture
async def tls_settings(
    tls_kafka: EmbeddedKafka, tls_redis: EmbeddedRedis, pki: Pki, model_dir: Path
) -> Settings:
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=tls_kafka.bootstrap,
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=pki.server.ca,
        redis_url=tls_redis.url,
        model_dir=model_dir,
        in_topic=f"secure.in.{run}",
        out_topic=f"secure.out.{run}",
        dlq_topic=f"secure.dlq.{run}",
        group_id=f"secure-{run}",
        metrics_port=0,
        commit_interval_s=0.2,
    )
    topics = {settings.in_topic: 2, settings.out_topic: 2, settings.dlq_topic: 1}
    await ensure_topics(settings.kafka_options(), topics)
    return settings


def verdict_keys(redis_url: str) -> int:
    with redis.Redis.from_url(redis_url) as client:
        return sum(1 for _ in client.scan_iter(match=f"{KEY_PREFIX}*"))


async def test_moderates_over_tls_with_a_password_protected_tls_redis(
    tls_settings: Settings, classifier: Classifier
) -> None:
    assert tls_settings.redis_url.startswith(f"rediss://:{IN_URL}@")
    keys_before = verdict_keys(tls_settings.redis_url)
    run = uuid.uuid4().hex[:6]  # new texts, so new verdicts, whatever ran before on this Redis
    texts = [f"hello there {run}", f"gg well played {run}", f"you are an idiot {run}",
             f"see you tomorrow {run}"]  # fmt: skip
    async with Moderator(tls_settings, classifier=classifier) as service:
        await service.wait_ready(30)
        assert await service.cache.wait_redis(10), "AUTH over TLS to Redis succeeded"
        await produce(tls_settings.kafka_options(), tls_settings.in_topic,
                      [chat(i, texts[i % 4]) for i in range(40)])  # fmt: skip
        records = await consume(tls_settings.kafka_options(), tls_settings.out_topic,
                                until=distinct_ids(40))  # fmt: skip
    decisions = decisions_by_id(records)
    assert set(decisions) == {f"m-{i}" for i in range(40)}
    actions = {d["action"] for d in decisions.values()}
    assert "allow" in actions
    assert actions - {ALLOW}, "the insult was acted on"
    assert verdict_keys(tls_settings.redis_url) >= keys_before + 4, "verdicts written over TLS"


async def test_mutual_tls_moderates_with_a_client_certificate_and_refuses_without(
    tls_settings: Settings, mtls_kafka: EmbeddedKafka, pki: Pki, classifier: Classifier
) -> None:
    settings = tls_settings.replace(
        kafka_bootstrap=mtls_kafka.bootstrap,
        kafka_ssl_certfile=pki.client.cert,
        kafka_ssl_keyfile=pki.client.key,
        redis_url="",
    )
    topics = {settings.in_topic: 2, settings.out_topic: 2, settings.dlq_topic: 1}
    await ensure_topics(settings.kafka_options(), topics)
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        await produce(settings.kafka_options(), settings.in_topic,
                      [chat(i, f"with a client certificate {i}") for i in range(20)])  # fmt: skip
        records = await consume(settings.kafka_options(), settings.out_topic,
                                until=distinct_ids(20))  # fmt: skip
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(20)}

    anonymous = settings.replace(kafka_ssl_certfile=None, kafka_ssl_keyfile=None)
    with pytest.raises(KafkaConnectError, match="over SSL"):
        await asyncio.wait_for(Moderator(anonymous, classifier=classifier).start(), 60)


async def test_an_untrusted_broker_certificate_fails_start_up_clearly(
    tls_settings: Settings, pki: Pki, classifier: Classifier, caplog: pytest.LogCaptureFixture
) -> None:
    settings = tls_settings.replace(kafka_ssl_cafile=pki.other_ca)
    service = Moderator(settings, classifier=classifier)
    with pytest.raises(KafkaConnectError) as caught:
        await asyncio.wait_for(service.start(), 60)
    message = str(caught.value)
    assert settings.kafka_bootstrap in message
    assert "over SSL" in message
    assert "MODERATOR_KAFKA_SSL_*" in message
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text, "the log line names the cause"


async def test_plaintext_to_a_tls_listener_fails_start_up_clearly(
    tls_settings: Settings, classifier: Classifier
) -> None:
    settings = tls_settings.replace(kafka_security_protocol="PLAINTEXT")
    with pytest.raises(KafkaConnectError, match=r"over PLAINTEXT: .*Unable to bootstrap"):
        await asyncio.wait_for(Moderator(settings, classifier=classifier).start(), 60)


async def test_a_wrong_redis_password_is_reported_and_decisions_keep_flowing(
    tls_settings: Settings, classifier: Classifier, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    settings = tls_settings.replace(redis_url=tls_settings.redis_url.replace(IN_URL, wrong))
    caplog.set_level(logging.WARNING, logger="moderator")
    async with Moderator(settings, classifier=classifier) as service:
        await service.wait_ready(30)
        await produce(settings.kafka_options(), settings.in_topic,
                      [chat(i, f"still moderated {i}") for i in range(20)])  # fmt: skip
        records = await consume(settings.kafka_options(), settings.out_topic,
                                until=distinct_ids(20))  # fmt: skip
        assert not service.cache.redis_available
    assert set(decisions_by_id(records)) == {f"m-{i}" for i in range(20)}
    warnings = [r.getMessage() for r in caplog.records if "redis at" in r.getMessage()]
    assert warnings, "a refused password is said, not mistaken for a quiet cache"
    assert "AuthenticationError" in warnings[0]
    assert "rediss://:***@127.0.0.1" in warnings[0]
    assert all(wrong not in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def auth_kafka() -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(authentication=True) as broker:
        yield broker


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_credentials_go_to_the_broker_and_a_refusal_is_clear(
    auth_kafka: EmbeddedKafka, settings: Settings, classifier: Classifier, mechanism: str
) -> None:
    """The SCRAM exchange reaches the broker, which refuses the (unknown) user; the error says
    so without the password. Without SASL the same broker refuses the connection outright."""
    sasl = settings.replace(
        kafka_bootstrap=auth_kafka.bootstrap,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism=mechanism,
        kafka_sasl_username="moderator",
        kafka_sasl_password=SECRET,
        redis_url="",
    )
    with pytest.raises(KafkaConnectError) as caught:
        await asyncio.wait_for(Moderator(sasl, classifier=classifier).start(), 60)
    message = str(caught.value)
    assert f"SASL_PLAINTEXT {mechanism} as 'moderator'" in message
    assert "refused the SASL user name or password" in message
    assert not leaks(message)

    plain = sasl.replace(kafka_security_protocol="PLAINTEXT")
    with pytest.raises(KafkaConnectError) as caught:
        await asyncio.wait_for(Moderator(plain, classifier=classifier).start(), 60)
    assert "refused the SASL" not in str(caught.value)


def run_moderator(settings: Settings, *flags: str) -> ModeratorChild:
    """`moderator -v run` (debug logging, aiokafka's included) with settings from the env."""
    env = moderator_env(
        kafka_bootstrap=settings.kafka_bootstrap,
        kafka_security_protocol=settings.kafka_security_protocol,
        kafka_sasl_mechanism=settings.kafka_sasl_mechanism,
        kafka_sasl_username=settings.kafka_sasl_username,
        kafka_sasl_password=settings.kafka_sasl_password,
        kafka_ssl_cafile=settings.kafka_ssl_cafile or "",
        redis_url=settings.redis_url,
        model_dir=settings.model_dir,
        in_topic=settings.in_topic,
        out_topic=settings.out_topic,
        dlq_topic=settings.dlq_topic,
        group_id=settings.group_id,
        threads=1,
    )
    return ModeratorChild(["-v", "run", *flags], env).start()


async def finish(proc: ModeratorChild, timeout_s: float = 120) -> str:
    """All it printed, once it exits (SIGTERM first); killed if it outlives `timeout_s`."""
    await asyncio.to_thread(proc.terminate, timeout_s)
    return proc.output()


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except OSError as exc:  # HTTPError carries the status of a 4xx/5xx reply
        return getattr(exc, "code", 0), b""


async def test_secrets_stay_out_of_debug_logs_metrics_and_records(
    tls_settings: Settings, tls_redis: EmbeddedRedis, pki: Pki
) -> None:
    """A real process with debug logging on, a password-protected Redis over TLS, and a Redis
    password that is wrong for a while (so failures get logged): the password is nowhere."""
    wrong = tls_settings.redis_url.replace(IN_URL, quote(f"{SECRET}-wrong", safe=""))
    proc = run_moderator(tls_settings.replace(redis_url=wrong))
    try:
        found = await asyncio.to_thread(proc.wait_for, r"metrics +http://(\S+):(\d+)/metrics")
        base = f"http://{found[1]}:{found[2]}"
        # Chat text is data: even a line made to look like a log line or a format string is
        # never logged, at any level.
        hostile = f"{MARK} %s %(x)s {{0}} \x1b[2J\n2026-01-01 ERROR moderator: fake line"
        await produce(tls_settings.kafka_options(), tls_settings.in_topic,
                      [chat(i, f"hi {i}" if i else hostile) for i in range(10)])  # fmt: skip
        records = await consume(tls_settings.kafka_options(), tls_settings.out_topic,
                                until=distinct_ids(10))  # fmt: skip
        assert len(decisions_by_id(records)) == 10
        pages = {path: await asyncio.to_thread(http_get, base + path)
                 for path in ("/metrics", "/healthz", "/readyz", "/", "/metrics/../etc/passwd",
                              "/debug", "/favicon.ico")}  # fmt: skip
    finally:
        output = await finish(proc)
    assert proc.exit_code == 0, output[-3000:]
    assert "DEBUG" in output, "debug logging was on, aiokafka's included"
    warned = r"redis at rediss://:\*\*\*@127.0.0.1.* is unavailable \(AuthenticationError"
    assert re.search(warned, output)
    assert [pages[p][0] for p in ("/metrics", "/healthz", "/readyz")] == [200, 200, 200]
    assert b"moderator_decisions_total" in pages["/metrics"][1]
    for path in ("/", "/metrics/../etc/passwd", "/debug", "/favicon.ico"):
        assert pages[path][0] == 404, path
    decisions = b"".join(r.value for r in records)
    for where, text in (("output", output), ("metrics", pages["/metrics"][1].decode()),
                        ("decisions", decisions.decode())):  # fmt: skip
        assert not leaks(text), f"the Redis password leaked into the {where}"
    assert MARK not in output, "chat text reached a log line"
    assert "fake line" not in output
    assert orjson.loads(records[0].value)["message_id"].startswith("m-")


async def test_a_refused_sasl_login_exits_69_without_the_password(
    auth_kafka: EmbeddedKafka, settings: Settings
) -> None:
    sasl = settings.replace(
        kafka_bootstrap=auth_kafka.bootstrap,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="moderator",
        kafka_sasl_password=SECRET,
        redis_url="",
    )
    proc = run_moderator(sasl)
    code = await asyncio.to_thread(proc.wait, 120)
    output = proc.output()
    assert code == 69, output[-3000:]
    assert "moderator: error: the producer could not connect to Kafka" in output
    assert "refused the SASL user name or password" in output
    assert "DEBUG" in output
    assert not leaks(output)
