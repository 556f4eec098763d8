"""From camera frames to the model's inputs, checked once at load.

The daemon feeds models whose inputs it can make from one NV12 camera:

- exactly one ``float32`` or ``uint8`` input of shape ``(1, 12, h, w)``: two stacked YUV420
  frames of a ``2w x 2h`` model frame, previous then current
  (:func:`plugin_host.frames.nv12_to_yuv6`; README "Frames and cameras"), as the demo model's
  ``img`` (float32: the samples as floats; uint8: as they are, for a model that converts
  inside, as openpilot's newer vision models do); never an input that indexes an Embedding;
- any number of integer inputs that index an Embedding (the demo's ``desire``): fed index 0
  (no desire source exists yet);
- any input the policy gives a value for, in its ``[[artifact]]``'s ``fixed_inputs`` (such as
  openpilot's ``traffic_convention``): fed that value on every frame. A number fills the
  input; an array fills it by numpy's broadcasting rules (checked in ``fixed_inputs.py``);
- the recurrent state, which the executor carries.

Anything else is refused at load with the input's name, shape and dtype, and so is a camera
that does not deliver NV12. The image is made in the sandbox worker, from the camera's pool
mapped read-only there (``SandboxedExecutor.feed_frames``, ``plugin_host/sandbox/
frame_feed.py``), so the only copy of the frame is the conversion itself; the index inputs and
fixed values are written once into the executor's shared input buffers
(:meth:`ModelFeed.prepare`), which the worker reads in place on every call.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from abi import dtypes

from ..errors import PluginHostError
from ..sandbox.frame_feed import image_input_problem
from .fixed_inputs import fixed_input_values

__all__ = ["ModelFeed"]


class ModelFeed:
    """Which of a model's inputs a camera makes, checked at load (see the module docstring).

    ``fixed`` holds the policy's ``fixed_inputs`` (name -> :class:`~plugin_host.policy.model.
    FixedInput`), and ``source`` names the policy file in errors about them.
    """

    def __init__(self, graph: Any, index_inputs: Mapping[str, int], layout: Any,
                 fixed: Mapping[str, Any] | None = None, source: str = "the policy") -> None:
        state = set(graph.state)
        values, problems = fixed_input_values(graph, index_inputs, fixed or {})
        if problems:
            raise PluginHostError(problems[0].describe(source))
        self.values: dict[str, np.ndarray] = values
        image, indices, refused, free, images = None, [], [], [], []
        for spec in graph.inputs:
            if spec.name in state or spec.name in values:
                continue
            shape = tuple(spec.shape)
            if image is None and spec.name not in index_inputs \
                    and image_input_problem(spec) is None:
                image = spec
            elif spec.name in index_inputs and dtypes.to_numpy(spec.dtype).kind in "iu":
                indices.append(spec.name)
            else:
                refused.append(f"{spec.name} {spec.dtype}{shape}")
                free += [d for d in shape if type(d) is not int and d not in free]
                if image is not None and image_input_problem(spec) is None:
                    images.append(spec.name)
        if image is None or refused:
            what = ", ".join(refused) or "no float32 or uint8 (1, 12, h, w) image input"
            hint = (f"; dims {', '.join(map(repr, free))} are known only at run time: fix "
                    f"them when building, e.g. build --onnx ... --dim {free[0]}=SIZE"
                    if free else "")
            second = (f"; {', '.join(images)} would need a second camera's frames, but one "
                      f"model run takes the frames of one camera" if images else "")
            give = ("; any other input needs a value in the policy's fixed_inputs of this "
                    "[[artifact]]" if len(refused) > len(images) and not free else "")
            raise PluginHostError(f"model {graph.name!r}: the daemon cannot make these inputs "
                                  f"from a camera: {what} (it feeds one float32 or uint8 "
                                  f"(1, 12, h, w) two-frame YUV stack of a fixed size and "
                                  f"Embedding indices{hint}{second}{give})")
        if layout.format != "NV12":
            raise PluginHostError(f"the daemon needs an NV12 camera for model {graph.name!r}, "
                                  f"got {layout.format} ({layout.describe()})")
        self.image = image.name
        self.indices = tuple(indices)

    @property
    def buffered(self) -> tuple[str, ...]:
        """The inputs written into the shared input buffers: the indices and fixed values."""
        return self.indices + tuple(self.values)

    def prepare(self, buffers: Mapping[str, np.ndarray]) -> None:
        """New buffers (after ``input_buffers(names=self.buffered)``): index inputs zeroed,
        fixed inputs their values."""
        for name in self.indices:
            buffers[name][...] = 0
        for name, value in self.values.items():
            buffers[name][...] = value
