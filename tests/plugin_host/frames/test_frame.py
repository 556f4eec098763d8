"""Frame layouts and metadata: default strides and offsets, validation of untrusted layouts."""

from __future__ import annotations

import numpy as np
import pytest

from plugin_host.errors import FrameFormatError
from plugin_host.frames import Frame, FrameLayout, plane_array


def test_default_nv12_layout_is_openpilots_shape():
    layout = FrameLayout.create("NV12", 1928, 1208)
    y, uv = layout.planes
    assert (y.name, y.shape, y.offset, y.stride) == ("Y", (1208, 1928), 0, 1984)
    assert (uv.name, uv.shape, uv.offset, uv.stride) == ("UV", (604, 964, 2), 1984 * 1208, 1984)
    assert layout.nbytes == 1984 * 1208 * 3 // 2
    assert layout.strides == (1984, 1984) and layout.offsets == (0, 1984 * 1208)


@pytest.mark.parametrize("fmt, shapes", [("RGB", [(4, 6, 3)]), ("GRAY", [(4, 6)]),
                                         ("NV12", [(4, 6), (2, 3, 2)])])
def test_formats_and_packed_layouts(fmt, shapes):
    layout = FrameLayout.create(fmt, 6, 4, stride_align=1)
    assert [p.shape for p in layout.planes] == shapes
    buf = bytearray(range(layout.nbytes))
    arrays = [plane_array(buf, p) for p in layout.planes]
    assert sum(a.size for a in arrays) == layout.nbytes  # packed: every byte in one plane
    assert FrameLayout.from_dict(layout.to_dict()) == layout


@pytest.mark.parametrize("change, match", [
    ({"format": "YUYV"}, "unknown frame format"),
    ({"width": 0}, "width"),
    ({"width": 17}, "even"),
    ({"height": True}, "height"),
    ({"strides": [8, 16]}, "stride 8 is outside"),
    ({"strides": [16]}, "list of 2"),
    ({"offsets": [0, 64]}, "overlap"),
    ({"offsets": [0, 10_000]}, "outside the buffer"),
    ({"offsets": [-64, 128]}, "outside the buffer"),
    ({"nbytes": 2**40}, "nbytes"),
    ({"nbytes": 100}, "outside the buffer"),
])
def test_bad_layouts_are_refused(change, match):
    good = FrameLayout.create("NV12", 16, 8).to_dict()
    with pytest.raises(FrameFormatError, match=match):
        FrameLayout.from_dict({**good, **change})


def test_frame_metadata_round_trips_and_is_validated():
    layout = FrameLayout.create("GRAY", 8, 2)
    frame = Frame("road", 7, 100, 150, layout, 1, 3, "abcd")
    assert Frame.from_dict(frame.to_dict()) == frame
    assert (frame.format, frame.width, frame.height, frame.strides, frame.offsets,
            frame.nbytes) == ("GRAY", 8, 2, (64,), (0,), 128)
    for bad, match in [({"frame_id": -1}, "frame_id"), ({"timestamp_eof": 50}, "before"),
                       ({"camera": ""}, "camera"), ({"extra": 1}, "exactly the keys"),
                       ({"slot": 1.0}, "slot"), ({"layout": {"format": "NV12"}}, "width")]:
        with pytest.raises(FrameFormatError, match=match):
            Frame.from_dict({**frame.to_dict(), **bad})


def test_plane_views_are_zero_copy():
    layout = FrameLayout.create("NV12", 4, 2, stride_align=8)
    buf = bytearray(layout.nbytes)
    y = plane_array(buf, layout.plane("Y"))
    y[1, 3] = 9
    assert buf[8 + 3] == 9
    assert np.shares_memory(y, np.frombuffer(buf, np.uint8))
