"""Fixtures of the onnxruntime backend's tests."""

from __future__ import annotations

import pytest

from plugins.onnxruntime_backend import layers


@pytest.fixture(params=["probed", "moved"])
def u8s8(request, monkeypatch):
    """The u8 x s8 path as this CPU's probe says (``probed``), and moved to uint8 whatever it
    says (``moved``, what a CPU without VNNI runs): whether uint8 by int8 goes as it is."""
    if request.param == "moved":
        monkeypatch.setattr(layers, "u8s8_exact", lambda: False)
    return request.param == "probed" and layers.u8s8_exact()
