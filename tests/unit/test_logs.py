"""Log lines an operator can ship: the JSON format and the two settings that choose it."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from moderator.errors import ConfigError
from moderator.logs import JsonFormatter, log_settings


def test_a_json_line_has_the_time_level_logger_message_and_ids() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("moderator.test-json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        ids = {"topic": "chat.messages", "partition": 3, "offset": 41}
        logger.warning("refused %s", "it", extra=ids)
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            logger.exception("it broke")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, "a traceback stays inside its line"
    first, second = (orjson.loads(line) for line in lines)
    assert first["timestamp"].endswith("Z")
    assert first["level"] == "WARNING"
    assert first["logger"] == "moderator.test-json"
    assert first["message"] == "refused it"
    assert (first["topic"], first["partition"], first["offset"]) == ("chat.messages", 3, 41)
    assert isinstance(first["pid"], int)
    assert second["level"] == "ERROR"
    assert "ValueError: boom" in second["exception"]
    assert "topic" not in second


def test_log_settings_come_from_the_flag_or_the_environment() -> None:
    env = {"MODERATOR_LOG_FORMAT": "json", "MODERATOR_LOG_LEVEL": "warning"}
    assert log_settings({}) == ("text", logging.INFO)
    assert log_settings(env) == ("json", logging.WARNING)
    assert log_settings(env, log_format="text", log_level="DEBUG") == ("text", logging.DEBUG)


@pytest.mark.parametrize(
    ("env", "name"),
    [({"MODERATOR_LOG_FORMAT": "xml"}, "MODERATOR_LOG_FORMAT"),
     ({"MODERATOR_LOG_LEVEL": "loud"}, "MODERATOR_LOG_LEVEL")],
)  # fmt: skip
def test_bad_log_settings_name_the_setting(env: dict[str, str], name: str) -> None:
    with pytest.raises(ConfigError, match=name) as caught:
        log_settings(env)
    assert caught.value.exit_code == 78
