"""Starting a Kafka client with an error that says what to check; stopping any client in time;
what the runtime uses of aiokafka's clients (`Producer`, `Sender`: protocols a test can fake).

aiokafka reports a refused TLS certificate or SASL password as "Unable to bootstrap", and a
SCRAM rejection from some brokers as a bare `KeyError`; an operator needs the address, the
security protocol and the settings to look at instead. Credentials never enter the message.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Mapping
from typing import Any, Protocol

from aiokafka.errors import (
    AuthenticationFailedError,
    AuthenticationMethodNotSupported,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from moderator.errors import KafkaConnectError

log = logging.getLogger(__name__)

# aiokafka's consumer.stop() can wait forever on its heartbeat task (aio-libs/aiokafka#773);
# seen here under CPU starvation, after the offsets were committed. A process that has finished
# its work must still exit.
STOP_TIMEOUT_S = 10.0

REFUSED_LOGIN = (SaslAuthenticationFailed, AuthenticationFailedError, IllegalSaslStateError)
UNSUPPORTED_MECHANISM = (UnsupportedSaslMechanismError, AuthenticationMethodNotSupported)


class Startable(Protocol):
    async def start(self) -> None: ...


class Stoppable(Protocol):
    async def stop(self) -> None: ...


class Sender(Protocol):
    """What final decisions use of aiokafka's `AIOKafkaProducer`: one record at a time."""

    async def send(self, topic: str, value: Any, key: Any, headers: Any) -> Any: ...


class Producer(Sender, Stoppable, Protocol):
    """What the publisher uses of aiokafka's `AIOKafkaProducer`."""

    def create_batch(self) -> Any: ...
    async def partitions_for(self, topic: str) -> Any: ...
    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any: ...


async def stop_within(client: Stoppable, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """`await client.stop()`, given up (with one warning) after `timeout_s`; never raises.

    A stop past its time is cancelled but not waited for: `asyncio.wait_for` would wait for the
    cancellation to finish, and a stop stuck where it ignores cancellation (aiokafka's consumer
    with its broker gone at the wrong moment) would hold the process forever.
    """
    name = type(client).__name__
    task = asyncio.ensure_future(client.stop())
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        _given_up.add(task)
        task.add_done_callback(_given_up.discard)
        log.warning("%s did not stop within %g s; going on without it", name, timeout_s)
        return
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("error while stopping %s", name, exc_info=exc)


_given_up: set[asyncio.Future[None]] = set()  # stops given up on: referenced until they end


async def start_client(client: Startable, options: Mapping[str, Any], role: str) -> None:
    """`await client.start()`, turning a failure into a `KafkaConnectError`."""
    try:
        await client.start()
    except (KafkaError, OSError, ValueError, KeyError, AssertionError, struct.error) as exc:
        raise KafkaConnectError(describe_failure(exc, options, role)) from exc


def describe_failure(exc: BaseException, options: Mapping[str, Any], role: str) -> str:
    protocol = options.get("security_protocol", "PLAINTEXT")
    how = protocol
    if protocol.startswith("SASL"):
        how += f" {options.get('sasl_mechanism')} as {options.get('sasl_plain_username')!r}"
    if isinstance(exc, UNSUPPORTED_MECHANISM):
        hint = "the broker does not offer this SASL mechanism (MODERATOR_KAFKA_SASL_MECHANISM)"
    elif isinstance(exc, REFUSED_LOGIN) or (
        protocol.startswith("SASL") and not isinstance(exc, KafkaError | OSError)
    ):  # Kafka answers SaslAuthenticationFailed; some brokers end the SCRAM exchange instead
        hint = "the broker refused the SASL user name or password (MODERATOR_KAFKA_SASL_*)"
    else:
        hint = (
            "check MODERATOR_KAFKA_BOOTSTRAP and MODERATOR_KAFKA_SECURITY_PROTOCOL"
            + (", MODERATOR_KAFKA_SSL_*" if protocol.endswith("SSL") else "")
            + (", MODERATOR_KAFKA_SASL_*" if protocol.startswith("SASL") else "")
            + "; the log line above names the cause"
        )
    detail = str(exc) or "no detail"
    if not detail.startswith(type(exc).__name__):
        detail = f"{type(exc).__name__}: {detail}"
    return (
        f"{role} could not connect to Kafka at {options.get('bootstrap_servers')} over {how}: "
        f"{detail} ({hint})"
    )
