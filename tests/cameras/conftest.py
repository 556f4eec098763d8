"""Fixtures of the camera plugin tests: cameras that are stopped after the test."""

from __future__ import annotations

import pytest


@pytest.fixture
def cameras():
    made = []

    def keep(camera):
        made.append(camera)
        return camera

    yield keep
    for camera in made:
        close = getattr(camera, "close", None) or camera.stop
        close()
