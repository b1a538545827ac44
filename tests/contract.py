"""The record contract: every record a test reads is checked against moderator/schemas/."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from importlib import resources
from typing import Any

import jsonschema
import orjson

SCHEMAS = (
    "chat-message",
    "decision",
    "dead-letter-headers",
    "review",
    "verdict",
    "override",
    "audit",
    "shadow",
)


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    text = (resources.files("moderator") / "schemas" / f"{name}.schema.json").read_bytes()
    schema = orjson.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)  # type: ignore[no-any-return]


def check_decision(decision: dict[str, Any]) -> dict[str, Any]:
    """The decision, or jsonschema.ValidationError naming the field that breaks the schema."""
    validator("decision").validate(decision)
    return decision


def check_review(record: dict[str, Any]) -> dict[str, Any]:
    """The review record, or jsonschema.ValidationError naming the field that breaks the schema."""
    validator("review").validate(record)
    return record


def check_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """The verdict, or jsonschema.ValidationError naming the field that breaks the schema."""
    validator("verdict").validate(record)
    return record


def check_shadow(record: dict[str, Any]) -> dict[str, Any]:
    """The shadow topic's record, or jsonschema.ValidationError naming the field that breaks it."""
    validator("shadow").validate(record)
    return record


def check_dead_letter_headers(headers: Iterable[tuple[str, bytes]]) -> dict[str, str]:
    """A dead letter's headers as a dict, checked against the schema."""
    as_dict = {name: value.decode() for name, value in headers}
    validator("dead-letter-headers").validate(as_dict)
    return as_dict
