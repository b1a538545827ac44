"""Secrets are scrubbed from URLs, log records (arguments and tracebacks) and error messages."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from moderator import redaction
from moderator.config import Settings
from moderator.errors import ConfigError
from moderator.kafka.connect import describe_failure
from moderator.redaction import redact_url, url_secrets


def test_redact_url_hides_user_info_and_query_passwords() -> None:
    assert redact_url("redis://:p%40ss@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("rediss://alice:pw@host/0?ssl_ca_certs=/ca.pem") == (
        "rediss://alice:***@host/0?ssl_ca_certs=/ca.pem"
    )
    assert redact_url("redis://host/0?password=hunter2&db=1") == "redis://host/0?password=***&db=1"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"
    assert set(url_secrets("redis://:p%40ss@h/0")) == {"p%40ss", "p@ss"}


def test_settings_name_every_secret_they_hold() -> None:
    settings = Settings(
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="mod",
        kafka_sasl_password="kafka-pw",
        redis_url="rediss://:redis-pw@cache:6380/0",
    )
    assert {"kafka-pw", "redis-pw"} <= set(settings.secrets())
    assert "kafka-pw" not in repr(settings)
    assert "redis-pw" not in repr(settings)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    library = logging.getLogger("some.library")
    level = library.level
    library.setLevel(logging.DEBUG)  # whatever earlier tests did to the levels
    saved = set(redaction._secrets)
    try:
        redaction.protect(["top-secret-pw", "pässwörd\\1"])
        yield stream
    finally:
        root.removeHandler(handler)
        library.setLevel(level)
        redaction._secrets.clear()
        redaction._secrets.update(saved)


def test_protected_secrets_never_reach_a_handler(captured: io.StringIO) -> None:
    log = logging.getLogger("some.library")
    log.warning("connecting with %s", "redis://:top-secret-pw@h/0")
    try:
        raise ValueError("bad password top-secret-pw")
    except ValueError:
        log.exception("failed")
    written = captured.getvalue()
    assert "top-secret-pw" not in written
    assert "connecting with redis://:***@h/0" in written
    assert "ValueError: bad password ***" in written
    assert redaction.scrub("x top-secret-pw y") == "x *** y"


def test_escaped_and_encoded_spellings_are_scrubbed(captured: io.StringIO) -> None:
    """aiokafka's debug log prints SASL PLAIN bytes as a bytes repr; URLs percent-encode."""
    secret = "pässwörd\\1"
    log = logging.getLogger("some.library")
    log.debug("request %r", b"mod\x00mod\x00" + secret.encode())
    log.debug("str %r, url redis://:%s@h/0", secret, quote(secret, safe=""))
    written = captured.getvalue()
    assert written.count("***") == 3, written
    for form in redaction.forms(secret):
        assert form not in written


def test_a_wrong_log_call_is_left_to_logging_to_report(captured: io.StringIO) -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "two %s %s", ("one",), None)
    assert redaction.RedactSecrets().filter(record)  # no exception from the filter itself


def test_a_connect_failure_names_address_protocol_and_settings_not_the_password() -> None:
    options = Settings(
        kafka_bootstrap="broker:9093",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-256",
        kafka_sasl_username="mod",
        kafka_sasl_password="kafka-pw",
    ).kafka_options()
    refused = describe_failure(KeyError("v"), options, "the producer")
    assert refused.startswith("the producer could not connect to Kafka at broker:9093 over "
                              "SASL_SSL SCRAM-SHA-256 as 'mod'")  # fmt: skip
    assert "refused the SASL user name or password" in refused
    unreachable = describe_failure(KafkaConnectionError("Unable to bootstrap"), options, "x")
    assert "MODERATOR_KAFKA_SSL_*" in unreachable
    assert "MODERATOR_KAFKA_SASL_*" in unreachable
    assert "KafkaConnectionError: KafkaConnectionError" not in unreachable
    assert "kafka-pw" not in refused + unreachable


@pytest.mark.parametrize("url", ["redis://:ab#cd@h/0", "redis://:ab/cd@h:6379/0"])
def test_an_unencoded_password_is_refused_without_echoing_it(url: str) -> None:
    with pytest.raises(ConfigError, match="MODERATOR_REDIS_URL: is not a valid URL") as caught:
        Settings(redis_url=url)
    assert "ab" not in str(caught.value).replace("percent", "")


def test_url_secrets_cover_the_spellings_redis_py_decodes() -> None:
    assert "a+b+c" in url_secrets("redis://:a%2Bb+c@h/0")  # redis-py: unquote
    assert "zz" in url_secrets("redis://h/0?pass%77ord=zz")  # the key decodes to password


def test_a_broker_refusal_gets_the_sasl_hint() -> None:
    options = {"bootstrap_servers": "b:9092", "security_protocol": "SASL_SSL",
               "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "mod"}  # fmt: skip
    refused = describe_failure(SaslAuthenticationFailed("bad"), options, "the consumer")
    assert "refused the SASL user name or password" in refused
    unsupported = describe_failure(UnsupportedSaslMechanismError(), options, "the consumer")
    assert "does not offer this SASL mechanism" in unsupported
