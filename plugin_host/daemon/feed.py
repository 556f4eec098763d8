"""From camera frames to the model's inputs, checked once at load.

The daemon feeds models whose inputs it can make from one NV12 camera:

- exactly one ``float32`` input of shape ``(1, 12, h, w)`` (``h``, ``w`` even): two stacked
  YUV420 frames of a ``2w x 2h`` model frame, previous then current
  (:func:`plugin_host.frames.nv12_to_yuv6`; README "Frames and cameras"), as the demo model's
  ``img``;
- any number of integer inputs that index an Embedding (the demo's ``desire``): fed index 0
  (no desire source exists yet);
- the recurrent state, which the executor carries.

Anything else is refused at load with the input's name, shape and dtype, and so is a camera
that does not deliver NV12. Per frame, :meth:`ModelFeed.fill` writes the current frame's six
channels straight into the executor's shared input buffer (after moving the previous frame's
six into the first half), so the only copy of the frame is the conversion itself.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from abi import dtypes

from ..errors import PluginHostError
from ..frames import nv12_to_yuv6

__all__ = ["ModelFeed"]


class ModelFeed:
    """Fills a model's input buffers from NV12 frames (see the module docstring)."""

    def __init__(self, graph: Any, index_inputs: Mapping[str, int], layout: Any) -> None:
        state = set(graph.state)
        image, indices, refused = None, [], []
        for spec in graph.inputs:
            if spec.name in state:
                continue
            shape = tuple(spec.shape)
            if (spec.dtype == "float32" and len(shape) == 4 and shape[:2] == (1, 12)
                    and all(type(d) is int and d > 0 for d in shape[2:]) and image is None):
                image = spec
            elif spec.name in index_inputs and dtypes.to_numpy(spec.dtype).kind in "iu":
                indices.append(spec.name)
            else:
                refused.append(f"{spec.name} {spec.dtype}{shape}")
        if image is None or refused:
            what = ", ".join(refused) or "no float32 (1, 12, h, w) image input"
            raise PluginHostError(f"model {graph.name!r}: the daemon cannot make these inputs "
                                  f"from a camera: {what} (it feeds one float32 (1, 12, h, w) "
                                  f"two-frame YUV stack and Embedding indices)")
        if layout.format != "NV12":
            raise PluginHostError(f"the daemon needs an NV12 camera for model {graph.name!r}, "
                                  f"got {layout.format} ({layout.describe()})")
        self.image = image.name
        self.indices = tuple(indices)
        self.height, self.width = 2 * image.shape[2], 2 * image.shape[3]
        self._have_previous = False

    def reset(self) -> None:
        """The next frame is stacked with itself (after a state reset, a restart, a gap)."""
        self._have_previous = False

    def prepare(self, buffers: Mapping[str, np.ndarray]) -> None:
        """New buffers (after ``input_buffers()``): index inputs zeroed, no previous frame."""
        for name in self.indices:
            buffers[name][...] = 0
        self.reset()

    def fill(self, buffers: Mapping[str, np.ndarray], planes: Mapping[str, np.ndarray]) -> None:
        img = buffers[self.image]
        if self._have_previous:
            img[0, :6] = img[0, 6:]
        nv12_to_yuv6(planes["Y"], planes["UV"], width=self.width, height=self.height,
                     out=img[0, 6:])
        if not self._have_previous:
            img[0, :6] = img[0, 6:]
            self._have_previous = True
