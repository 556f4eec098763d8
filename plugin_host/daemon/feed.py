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
  input; an array fills it by numpy's broadcasting rules. The value must fit the input's dtype
  (integers for an integer input, booleans for a bool one, in range, and a valid index for an
  Embedding's) and shape; it may not name the recurrent state or an input the model lacks;
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

__all__ = ["ModelFeed"]


class ModelFeed:
    """Which of a model's inputs a camera makes, checked at load (see the module docstring).

    ``fixed`` holds the policy's ``fixed_inputs`` (name -> :class:`~plugin_host.policy.model.
    FixedInput`), and ``source`` names the policy file in errors about them.
    """

    def __init__(self, graph: Any, index_inputs: Mapping[str, int], layout: Any,
                 fixed: Mapping[str, Any] | None = None, source: str = "the policy") -> None:
        state = set(graph.state)
        fixed = dict(fixed or {})
        names = [s.name for s in graph.inputs if s.name not in state]
        for name in fixed:
            if name not in names:
                what = ("is the recurrent state, which the executor carries" if name in state
                        else f"is not an input of model {graph.name!r} (its inputs: "
                             f"{', '.join(names)})")
                raise PluginHostError(f"{_where(source, fixed[name])}: fixed_inputs.{name} "
                                      f"{what}")
        image, indices, refused, free, images = None, [], [], [], []
        self.values: dict[str, np.ndarray] = {}
        for spec in graph.inputs:
            if spec.name in state:
                continue
            shape = tuple(spec.shape)
            if spec.name in fixed:
                self.values[spec.name] = _fixed_value(spec, fixed[spec.name],
                                                      index_inputs.get(spec.name), source)
            elif image is None and spec.name not in index_inputs \
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


def _where(source: str, fixed: Any) -> str:
    return f"{source}:{fixed.line}" if getattr(fixed, "line", 0) else source


def _fixed_value(spec: Any, fixed: Any, vocab: int | None, source: str) -> np.ndarray:
    """The policy's value for ``spec`` as an array of its shape and dtype, or a
    PluginHostError naming the policy line, the input and what does not fit."""
    value, shape = fixed.value, tuple(spec.shape)
    dtype = dtypes.to_numpy(spec.dtype)

    def refuse(why: str) -> PluginHostError:
        return PluginHostError(f"{_where(source, fixed)}: fixed_inputs.{spec.name} {why} "
                               f"(input {spec.name!r} is {spec.dtype}{shape})")

    free = [d for d in shape if type(d) is not int]
    if free:
        raise refuse(f"cannot be fed: dims {', '.join(map(repr, free))} are known only at run "
                     f"time; fix them when building, e.g. build --onnx ... --dim {free[0]}=SIZE")
    if dtype.kind == "b" and value.dtype.kind != "b":
        raise refuse("must be true or false")
    if dtype.kind in "iu" and value.dtype.kind != "i":
        got = "booleans" if value.dtype.kind == "b" else "floats"
        raise refuse(f"must be integers, got {got}")
    if dtype.kind == "f" and value.dtype.kind == "b":
        raise refuse("must be numbers, got booleans")
    if dtype.kind in "iu":
        low, high = (0, vocab - 1) if vocab is not None else \
            (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
        bad = value[(value < low) | (value > high)]
        if bad.size:
            what = (f"an index of an Embedding of {vocab} rows" if vocab is not None
                    else f"a value of {spec.dtype}")
            raise refuse(f"holds {int(bad.flat[0])}, which is not {what} ({low} to {high})")
    try:
        filled = np.broadcast_to(value, shape)
    except ValueError:
        raise refuse(f"has shape {value.shape}, which does not fill {shape}: give one value, "
                     f"or an array that broadcasts to the input's shape") from None
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(filled, dtype=dtype)
    if dtype.kind == "f" and not np.isfinite(out).all():
        raise refuse(f"holds a value beyond {spec.dtype}'s range")
    out.flags.writeable = False
    return out
