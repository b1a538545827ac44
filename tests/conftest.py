"""Fixtures shared by unit and integration tests: the real (shipped) default model."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from moderator.config import Settings
from moderator.decide.classifier import Classifier
from moderator.decide.language import LanguageGate
from moderator.decide.screen import Reader

# These machines are shared and noisy: Hypothesis must judge inputs, never wall-clock time.
hypothesis_settings.register_profile(
    "noisy-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("noisy-machine")


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The shipped default model (or MODERATOR_MODEL_DIR). Missing is a failure, not a skip."""
    path = Settings.from_env().model_dir
    assert (path / "manifest.json").is_file(), f"{path}: no model (it is committed in git)"
    return path


@pytest.fixture(scope="session")
def classifier(model_dir: Path) -> Classifier:
    return Classifier(model_dir, threads=Settings().effective_threads)


@pytest.fixture(scope="session")
def gate() -> LanguageGate:
    return LanguageGate()


@pytest.fixture(scope="session")
def reader(classifier: Classifier, gate: LanguageGate) -> Reader:
    """How the service and `moderator score` read a message: windows and the language gate."""
    return Reader(classifier, gate=gate)
