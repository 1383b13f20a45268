"""Fixtures for the simulator's tests (helpers live in ``tests.simulator.support``)."""

from __future__ import annotations

import pytest

from infersight.simulator.profiles import ModelProfile
from infersight.simulator.specs import load_profile
from tests.simulator.support import RunFn, make_runner


@pytest.fixture(scope="session")
def profile_8b() -> ModelProfile:
    return load_profile("llama-3.1-8b-h200x1")


@pytest.fixture(scope="session")
def profile_70b() -> ModelProfile:
    return load_profile("llama-3.1-70b-h200x4")


@pytest.fixture(scope="session")
def run_fleet(profile_8b: ModelProfile) -> RunFn:
    return make_runner(profile_8b)
