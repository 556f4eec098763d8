"""The frame path: camera buffer pools in shared memory, leases, subscriptions, sync, formats.

See :mod:`plugin_host.frames.pool` (buffers, generation ids, leases, the read-only mapping),
:mod:`~plugin_host.frames.frame` (formats, layouts, frame metadata),
:mod:`~plugin_host.frames.queue` (subscriptions, conflation), :mod:`~plugin_host.frames.camera`
(the camera interface), :mod:`~plugin_host.frames.sync` (several cameras),
:mod:`~plugin_host.frames.convert` (NV12 to the demo model's input),
:mod:`~plugin_host.frames.rgb` (NV12, RGB or GRAY frames to a colour image input),
:mod:`~plugin_host.frames.geometry` (where a colour image lies in its frame) and
:mod:`~plugin_host.frames.replay_format` (the recorded-frames file).
"""

from .camera import Camera, ThreadedCamera
from .convert import (MODEL_HEIGHT, MODEL_WIDTH, FrameStacker, nearest_indices, nv12_to_yuv6,
                      stack_frames)
from .frame import FORMATS, MAX_DIM, MAX_FRAME_BYTES, Frame, FrameLayout, Plane, plane_array
from .geometry import ImageGeometry
from .pool import FramePool, Lease, LeakReport, PoolReader, SlotWriter, map_pool
from .queue import Subscription
from .replay_format import (RecordInfo, ReplayLimits, ReplayReader, ReplayWriter, Salvaged,
                            salvage)
from .rgb import (RgbFormat, RgbImage, fit_boxes, frame_to_rgb, gray_to_rgb, nv12_to_rgb,
                  rgb_to_rgb)
from .sync import DEFAULT_MAX_SKEW_MS, FrameSync

__all__ = [
    "Camera", "ThreadedCamera",
    "MODEL_HEIGHT", "MODEL_WIDTH", "FrameStacker", "nearest_indices", "nv12_to_yuv6",
    "stack_frames", "RgbFormat", "RgbImage", "fit_boxes", "frame_to_rgb", "nv12_to_rgb",
    "rgb_to_rgb", "gray_to_rgb", "ImageGeometry",
    "FORMATS", "MAX_DIM", "MAX_FRAME_BYTES", "Frame", "FrameLayout", "Plane", "plane_array",
    "FramePool", "Lease", "LeakReport", "PoolReader", "SlotWriter", "map_pool",
    "Subscription",
    "RecordInfo", "ReplayLimits", "ReplayReader", "ReplayWriter", "Salvaged", "salvage",
    "DEFAULT_MAX_SKEW_MS", "FrameSync",
]
