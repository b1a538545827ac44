"""Secrets are scrubbed from URLs, log records (arguments and tracebacks) and error messages."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from aiokafka.errors import KafkaConnectionError

from moderator import redaction
from moderator.config import Settings, redact_url, url_secrets
from moderator.connect import describe_failure


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
    saved = set(redaction._secrets)
    try:
        redaction.protect(["top-secret-pw"])
        yield stream
    finally:
        root.removeHandler(handler)
        redaction._secrets.clear()
        redaction._secrets.update(saved)


def test_protected_secrets_never_reach_a_handler(captured: io.StringIO) -> None:
    log = logging.getLogger("some.library")
    log.setLevel(logging.DEBUG)  # whatever earlier tests did to the levels
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
