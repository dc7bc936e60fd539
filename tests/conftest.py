"""Shared fixtures: tidy envs that are closed after the test (EGL contexts left open
at interpreter exit print errors)."""
from __future__ import annotations

import pytest

import robo_prm


@pytest.fixture
def make_env():
    """`make_env(task, **kwargs)` like robo_prm.make_env; every env made is closed at teardown."""
    made = []

    def _make(task, **kwargs):
        env = robo_prm.make_env(str(task), **kwargs)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()
