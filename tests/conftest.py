"""Shared fixtures: the real engine bundle, the shared test data, and per-domain engine fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.config import Settings, load_settings
from engines.bundle import Bundle

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("APPLIANCE_TEST_DATA", REPO.parent / "shared" / "data"))

# Each engine domain keeps its session-scoped fixtures (models loaded once) in its own module.
pytest_plugins = [
    "tests.fixtures.asr",
    "tests.fixtures.llm",
    "tests.fixtures.speech",
    "tests.fixtures.pipeline",
    "tests.fixtures.admin",
]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "MANIFEST.tsv").is_file():
        pytest.fail(f"test data not found at {DATA_DIR}; set APPLIANCE_TEST_DATA")
    return DATA_DIR


@pytest.fixture(scope="session")
def settings() -> Settings:
    """The shipped default configuration (with any APPLIANCE_* environment overrides)."""
    return load_settings(None)


@pytest.fixture(scope="session")
def bundle(settings: Settings) -> Bundle:
    """The real default bundle built by scripts/setup; size-checked, not re-hashed, per session."""
    return Bundle.open(settings.bundle.dir, verify=True, full=False)


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With APPLIANCE_TEST_DURATIONS=FILE (as .ci/run sets it), every test's time (set-up, call and
    tear-down together), slowest first: where the suite's time goes, kept beside the build."""
    target = os.environ.get("APPLIANCE_TEST_DURATIONS")
    if not target or not _DURATIONS:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    ranked = sorted(_DURATIONS.items(), key=lambda item: item[1], reverse=True)
    path.write_text("".join(f"{seconds:.2f}\t{node}\n" for node, seconds in ranked), encoding="utf-8")
