"""From camera frames to the model's inputs, checked once at load.

The daemon feeds models whose inputs it can make from one NV12 camera:

- exactly one ``float32`` or ``uint8`` input of shape ``(1, 12, h, w)``: two stacked YUV420
  frames of a ``2w x 2h`` model frame, previous then current
  (:func:`plugin_host.frames.nv12_to_yuv6`; README "Frames and cameras"), as the demo model's
  ``img`` (float32: the samples as floats; uint8: as they are, for a model that converts
  inside, as openpilot's newer vision models do); never an input that indexes an Embedding;
- or, named in the policy's ``image_inputs``, one colour image ``(1, 3, h, w)`` or
  ``(1, h, w, 3)``, float32 or uint8, of each frame, as a detector or classifier takes
  (:mod:`plugin_host.frames.rgb`: the colour order, scale, mean and std the policy gives);
- any number of integer inputs that index an Embedding (the demo's ``desire``): fed index 0
  (no desire source exists yet);
- any input the policy gives a value for, in its ``[[artifact]]``'s ``fixed_inputs`` (such as
  openpilot's ``traffic_convention``): fed that value on every frame. A number fills the
  input; an array fills it by numpy's broadcasting rules (checked in ``fixed_inputs.py``);
- the recurrent state, which the executor carries.

Anything else is refused at load with the input's name, shape and dtype, and so is a camera
that does not deliver NV12 (or, for a colour image, NV12, RGB or GRAY). The image is made in the
sandbox worker, from the camera's pool mapped read-only there
(``SandboxedExecutor.feed_frames``, ``plugin_host/sandbox/frame_feed.py``), so the only copy
of the frame is the conversion itself; the index inputs and fixed values are written once into
the executor's shared input buffers (:meth:`ModelFeed.prepare`), which the worker reads in
place on every call.

Each colour image's place in its camera's frame (the boxes of its fit:
:class:`~plugin_host.frames.geometry.ImageGeometry`) is :meth:`ModelFeed.geometry`, which the
daemon puts in every model message, so that a sink maps a detector's boxes back to the frame.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from abi import dtypes

from ..errors import PluginHostError
from ..frames.geometry import ImageGeometry
from ..frames.rgb import (SOURCE_FORMATS, RgbFormat, rgb_input_problem, rgb_layout,
                          rgb_size)
from ..sandbox.frame_feed import image_input_problem
from .fixed_inputs import fixed_input_values

__all__ = ["ModelFeed", "colour_image_formats"]


class ModelFeed:
    """Which of a model's inputs the cameras make, checked at load (see the module docstring).

    With one camera (``bound`` None) the model's one image input is found, and ``layout`` is
    that camera's frame layout. With ``bound`` (the policy's ``camera_inputs``: image input ->
    ``(camera name, layout)``; ``layout`` is then unused) each of those inputs is made from
    its camera's frames, and no other input may be an image. ``fixed`` holds the policy's
    ``fixed_inputs`` (name -> :class:`~plugin_host.policy.model.FixedInput`) and
    ``colour`` its ``image_inputs`` (name -> :class:`~plugin_host.policy.model.ImageInput`:
    those images are colour images, the others two-frame YUV stacks); ``source`` names the
    policy file in errors about any of them, ``bound_line`` the line of ``camera_inputs``.
    """

    def __init__(self, graph: Any, index_inputs: Mapping[str, int], layout: Any,
                 fixed: Mapping[str, Any] | None = None, source: str = "the policy",
                 bound: Mapping[str, tuple[str, Any]] | None = None,
                 bound_line: int = 0, colour: Mapping[str, Any] | None = None) -> None:
        state = set(graph.state)
        values, problems = fixed_input_values(graph, index_inputs, fixed or {})
        if problems:
            raise PluginHostError(problems[0].describe(source))
        self.values: dict[str, np.ndarray] = values
        formats, problems = colour_image_formats(graph, index_inputs, colour or {})
        if problems:
            name, line, message = problems[0]
            raise PluginHostError(f"{source}:{line}: image_inputs.{name}: {message}" if line
                                  else f"{source}: image_inputs.{name}: {message}")
        #: image input -> its colour image's format (None: a two-frame YUV stack)
        self.formats: dict[str, RgbFormat | None] = formats
        #: colour image input -> where it keeps its channels ("NCHW" or "NHWC")
        self.layouts: dict[str, str] = {
            s.name: str(rgb_layout(tuple(s.shape), s.layout)) for s in graph.inputs
            if s.name in self.formats}
        #: colour image input -> its (width, height)
        self.image_sizes: dict[str, tuple[int, int]] = {
            s.name: rgb_size(tuple(s.shape), self.layouts[s.name]) for s in graph.inputs
            if s.name in self.layouts}
        self._geometry: dict[tuple, dict[str, ImageGeometry]] = {}
        #: image input -> the camera whose frames make it (None: the stream's one camera)
        self.images: dict[str, str | None] = {}
        if bound:
            where = f"{source}:{bound_line}" if bound_line else source
            self.images = _bound_images(graph, bound, where, self.formats)
        image, indices, refused, free, images, colour_like = None, [], [], [], [], []
        if not bound and self.formats:
            image = next(s for s in graph.inputs if s.name in self.formats)
        for spec in graph.inputs:
            if spec.name in state or spec.name in values or spec.name in self.images \
                    or spec is image:
                continue
            shape = tuple(spec.shape)
            if not bound and image is None and spec.name not in index_inputs \
                    and image_input_problem(spec) is None:
                image = spec
            elif spec.name in index_inputs and dtypes.to_numpy(spec.dtype).kind in "iu":
                indices.append(spec.name)
            else:
                refused.append(f"{spec.name} {spec.dtype}{shape}")
                free += [d for d in shape if type(d) is not int and d not in free]
                if (bound or image is not None) and image_input_problem(spec) is None:
                    images.append(spec.name)
                elif rgb_input_problem(spec) is None and spec.name not in index_inputs:
                    colour_like.append(spec.name)
        if (not bound and image is None) or refused:
            what = ", ".join(refused) or "no float32 or uint8 (1, 12, h, w) image input"
            hint = (f"; dims {', '.join(map(repr, free))} are known only at run time: fix "
                    f"them when building, e.g. build --onnx ... --dim {free[0]}=SIZE"
                    if free else "")
            second = (f"; {', '.join(images)} would need a camera's frames too: name the "
                      f"camera of every image input in the policy's camera_inputs of this "
                      f"[[artifact]]" if images else "")
            paint = (f"; {', '.join(colour_like)} "
                     f"{'is a colour image' if len(colour_like) == 1 else 'are colour images'}"
                     f": give {'its' if len(colour_like) == 1 else 'each one'} colour order "
                     f"(and scale, mean, std) in the policy's image_inputs of this [[artifact]]"
                     if colour_like else "")
            give = ("; any other input needs a value in the policy's fixed_inputs of this "
                    "[[artifact]]" if len(refused) > len(images) + len(colour_like)
                    and not free else "")
            feeds = ("the images of camera_inputs" if bound else
                     "one float32 or uint8 (1, 12, h, w) two-frame YUV stack of a fixed size, "
                     "or one colour image of image_inputs,")
            raise PluginHostError(f"model {graph.name!r}: the daemon cannot make these inputs "
                                  f"from a camera: {what} (it feeds {feeds} and Embedding "
                                  f"indices{hint}{second}{paint}{give})")
        if not bound:
            if layout.format not in _sources(self.formats.get(image.name)):
                raise PluginHostError(f"the daemon needs an "
                                      f"{' or '.join(_sources(self.formats.get(image.name)))} "
                                      f"camera for model {graph.name!r}, got {layout.format} "
                                      f"({layout.describe()})")
            self.images = {image.name: None}
            self.formats.setdefault(image.name, None)
        else:
            self.formats.update((name, None) for name in self.images if name not in
                                self.formats)
        self.indices = tuple(indices)

    @property
    def image(self) -> str:
        """The first image input (the only one with one camera)."""
        return next(iter(self.images))

    @property
    def joint(self) -> bool:
        """True when the images are the frames of named cameras (``camera_inputs``), made
        by the host into the shared input buffers; else the worker makes the one image."""
        return None not in self.images.values()

    @property
    def buffered(self) -> tuple[str, ...]:
        """The inputs written into the shared input buffers: the indices, the fixed values
        and, with ``camera_inputs``, the images."""
        return self.indices + tuple(self.values) + (tuple(self.images) if self.joint else ())

    def geometry(self, frame_sizes: Mapping[str | None, tuple[int, int]]
                 ) -> dict[str, ImageGeometry]:
        """Each colour image input's place in the frame it is made from: ``frame_sizes`` maps
        the camera of each input (as :attr:`images` names it; None: the stream's one camera)
        to its frame's ``(width, height)``. Made once per frame sizes; a new dict each call."""
        key = tuple(sorted(frame_sizes.items(), key=lambda item: str(item[0])))
        made = self._geometry.get(key)
        if made is None:
            made = self._geometry[key] = {
                name: ImageGeometry.of(frame_sizes[self.images[name]], self.image_sizes[name],
                                       fmt.fit, fmt.crop_fraction)
                for name, fmt in self.formats.items() if fmt is not None}
        return dict(made)

    def prepare(self, buffers: Mapping[str, np.ndarray]) -> None:
        """New buffers (after ``input_buffers(names=self.buffered)``): index inputs zeroed,
        fixed inputs their values."""
        for name in self.indices:
            buffers[name][...] = 0
        for name, value in self.values.items():
            buffers[name][...] = value


def _sources(fmt: RgbFormat | None) -> tuple[str, ...]:
    """The camera formats an image is made from: a colour image's, else a YUV stack's."""
    return SOURCE_FORMATS if fmt is not None else ("NV12",)


def colour_image_formats(graph: Any, index_inputs: Mapping[str, int],
                         colour: Mapping[str, Any]
                         ) -> tuple[dict[str, RgbFormat | None], list[tuple[str, int, str]]]:
    """The policy's ``image_inputs`` checked against the model: each a colour image input (a
    uint8 one not normalized). Returns (name -> format, problems as ``(name, policy line,
    message)``); ``policy check --check-files`` makes the same checks."""
    state = set(graph.state)
    specs = {s.name: s for s in graph.inputs if s.name not in state}
    formats: dict[str, RgbFormat | None] = {}
    problems = []
    for name, entry in colour.items():
        spec = specs.get(name)
        if spec is None:
            problem = ("is the recurrent state, which the executor carries" if name in state
                       else f"is not an input of model {graph.name!r} (its inputs: "
                            f"{', '.join(specs)})")
        elif name in index_inputs:
            problem = f"input {name!r} indexes an Embedding"
        else:
            problem = rgb_input_problem(spec, entry.format)
        if problem:
            problems.append((name, entry.line, problem))
        else:
            formats[name] = entry.format
    return formats, problems


def _bound_images(graph: Any, bound: Mapping[str, tuple[str, Any]], where: str,
                  formats: Mapping[str, RgbFormat | None]) -> dict[str, str | None]:
    """``camera_inputs`` checked: each an image input of the model (a colour image where
    ``formats`` says so), each camera NV12."""
    state = set(graph.state)
    specs = {s.name: s for s in graph.inputs if s.name not in state}
    images: dict[str, str | None] = {}
    for name, (camera, layout) in bound.items():
        spec = specs.get(name)
        if spec is None:
            why = ("is the recurrent state, which the executor carries" if name in state
                   else f"is not an input of model {graph.name!r} (its inputs: "
                        f"{', '.join(specs)})")
            raise PluginHostError(f"{where}: camera_inputs.{name} {why}")
        problem = None if name in formats else image_input_problem(spec)
        if problem:
            raise PluginHostError(f"{where}: camera_inputs.{name}: {problem}")
        sources = _sources(formats.get(name))
        if layout.format not in sources:
            what = "a colour image is" if name in formats else "images are"
            raise PluginHostError(f"{where}: camera_inputs.{name}: camera {camera!r} delivers "
                                  f"{layout.format} ({layout.describe()}); {what} made "
                                  f"from {' or '.join(sources)} frames")
        images[name] = camera
    return images
