"""``plugin-host record``: record frames from a camera plugin into a recorded-frames file.

The file is what the ``replay`` camera plays (format: :mod:`plugin_host.frames.replay_format`).
Without ``--policy`` only the built-in camera plugins are available (``synthetic``,
``replay``); with one, any camera plugin the policy allows, configured with its
``[plugin.config]`` (which the options here override) and its granted capabilities.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tomllib
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ..cli import EXIT_INTERRUPTED
from ..errors import CameraError, CapabilityDenied, PluginError, PluginHostError, UsageError
from ..policy.model import freeze_table
from ..stop_signals import deferred_stop
from .common import Formatter, state_folder

_EXAMPLES = """\
examples:
  plugin-host record --camera synthetic --frames 100 --out road.phf
  plugin-host record --camera synthetic --width 640 --height 480 --format RGB --rate 30 \\
      --frames 300 --out small.phf
  plugin-host record --camera replay --set file=road.phf --set pace=fast --frames 50 \\
      --out first50.phf
  plugin-host record --camera my_cameras:wide --policy device.toml --frames 20 --out wide.phf
  plugin-host record --salvage .road.phf.k2x9w1qe.partial --out road.phf

The file: a 32-byte header (magic \\x89PHFRM\\r\\n, version 1) and canonical msgpack camera
metadata, then one record per frame (frame_id, timestamp_sof, timestamp_eof, layout, CRC-32,
raw bytes). See README.md, "Frames and cameras".
"""


def register(verbs) -> None:
    p = verbs.add_parser(
        "record", formatter_class=Formatter, help="record frames from a camera into a file",
        description="Start a camera plugin's camera, record its next N frames with their "
                    "frame ids and timestamps into a recorded-frames file for the replay "
                    "camera, and print a summary (frames, bytes, frames the camera dropped). "
                    "The file appears only when complete; Ctrl-C or SIGTERM keeps the frames "
                    "recorded so far. A recording killed outright (a crash, SIGKILL, power "
                    "loss) leaves its frames in a hidden .FILE.*.partial beside FILE: "
                    "--salvage keeps its whole frames. Progress is shown on a terminal.",
        epilog=_EXAMPLES)
    p.add_argument("--camera", metavar="PLUGIN[:CAMERA]",
                   help="camera plugin (entry-point name), and which of its cameras when it "
                        "provides several (required unless --salvage)")
    p.add_argument("--frames", type=int, metavar="N",
                   help="frames to record (required unless --salvage)")
    p.add_argument("--out", required=True, metavar="FILE", help="file to write")
    p.add_argument("--salvage", metavar="PARTIAL",
                   help="instead of recording: write the whole frames of PARTIAL, a recording "
                        "that was cut off, to FILE (PARTIAL is left as it is)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--width", type=int, default=None, help="frame width (config key width)")
    p.add_argument("--height", type=int, default=None, help="frame height (config key height)")
    p.add_argument("--format", default=None, help="frame format: NV12, RGB, GRAY (config key "
                                                  "format)")
    p.add_argument("--rate", type=float, default=None, help="frames per second (config key "
                                                            "rate)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="any other config key of the camera plugin; VALUE is a TOML value "
                        "(a bare word is taken as a string); repeatable")
    p.add_argument("--policy", default=None, metavar="FILE",
                   help="load the camera plugin as this policy allows and configures it")
    p.add_argument("--state-dir", default=None, metavar="DIR",
                   help="what ${STATE_DIR} in the policy expands to")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="give up when no frame arrives for this long (default: 10)")
    p.set_defaults(func=_cmd_record)


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(v) for v in value]
    return value


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("width", "height", "format", "rate"):
        if getattr(args, key) is not None:
            out[key] = getattr(args, key)
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set needs KEY=VALUE, got {item!r}")
        out[key.strip()] = _parse_value(value.strip())
    return out


class _NoCapabilities(Mapping[str, Any]):
    """What a camera plugin holds when recording without a policy: nothing."""

    def __init__(self, plugin: str) -> None:
        self._plugin = plugin

    def __getitem__(self, name: str) -> Any:
        raise CapabilityDenied(plugin=self._plugin, capability=name,
                               policy="(none: plugin-host record without --policy)",
                               reason="recording without a policy grants no capabilities")

    def get(self, name: str, default: Any = None) -> Any:
        return default

    def __contains__(self, name: object) -> bool:
        return False

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0


def _make_cameras(args: argparse.Namespace, plugin: str):
    """The plugin's cameras and a cleanup callable."""
    from ..plugins import get_plugin_manager, load_plugins

    overrides = _overrides(args)
    if args.policy is None:
        pm = get_plugin_manager()
        cleanup = lambda: None  # noqa: E731
        base: dict[str, Any] = {}
        config: dict[str, Any] = {"name": plugin, "kind": "camera", "kernels": (),
                                  "capabilities": _NoCapabilities(plugin)}
    else:
        from ..policy import load_policy

        policy = load_policy(args.policy, state_dir=state_folder(args.state_dir, default=False))
        rule = policy.plugin(plugin)
        if rule is None or not policy.is_allowed(plugin) or rule.kind != "camera":
            raise UsageError(f"policy {policy.path} does not allow a camera plugin named "
                             f"{plugin!r}")
        loaded = load_plugins(policy, kinds={"camera"})
        pm, cleanup = loaded.pm, loaded.unconfigure
        config = dict(loaded.config(plugin))
        base = _thaw(rule.config)
    config["config"] = freeze_table({**base, **overrides})
    try:
        target = pm.get_plugin(plugin)
        cameras_of = {pm.get_name(p) for p in pm.get_plugins()
                      if hasattr(p, "plugin_host_add_cameras")}
        if target is None or plugin not in cameras_of:
            raise UsageError(f"no camera plugin named {plugin!r}; available: "
                             f"{', '.join(sorted(cameras_of)) or 'none'}"
                             + ("" if args.policy else " (others need --policy)"))
        others = [p for p in pm.get_plugins() if p is not target]
        caller = pm.subset_hook_caller("plugin_host_add_cameras", remove_plugins=others)
        try:
            provided = [c for result in caller(config=MappingProxyType(config)) for c in result]
        except PluginHostError:
            raise
        except Exception as exc:  # the plugin's failure, not a bug of the host
            raise PluginError(f"plugin {plugin!r}: plugin_host_add_cameras failed: "
                              f"{type(exc).__name__}: {exc}", plugin=plugin) from exc
    except BaseException:
        cleanup()
        raise
    return provided, cleanup


_CAMERA_OPTIONS = ("camera", "frames", "width", "height", "format", "rate", "settings",
                   "policy", "state_dir")


def _cmd_record(args: argparse.Namespace) -> int:
    from ..frames import ReplayWriter

    if args.salvage is not None:
        given = [f"--{name.replace('_', '-')}" for name in _CAMERA_OPTIONS
                 if getattr(args, name) not in (None, [])]
        if given:
            raise UsageError(f"--salvage takes only --out and --force, not {', '.join(given)}")
        return _salvage(args)
    missing = [f"--{name}" for name in ("camera", "frames") if getattr(args, name) is None]
    if missing:
        raise UsageError(f"{' and '.join(missing)} required (or --salvage PARTIAL)")
    if args.frames < 1:
        raise UsageError(f"--frames must be at least 1, got {args.frames}")
    if not args.force and os.path.exists(args.out):
        raise UsageError(f"{args.out} already exists (use --force to overwrite it)")
    _note_leftovers(args.out)
    # Ctrl-C or SIGTERM stops the loop between frames, so the frame being written is finished
    # and the camera's locks are never left held by an exception raised in the middle (a
    # second signal interrupts at once; plugin_host/stop_signals.py)
    with deferred_stop() as stops:
        plugin, _, wanted = args.camera.partition(":")
        cameras, cleanup = _make_cameras(args, plugin)
        try:
            return _record(args, plugin, _choose(cameras, plugin, wanted), ReplayWriter,
                           stops.check)
        finally:
            for c in cameras:
                close = getattr(c, "close", None) or getattr(c, "stop", None)
                if close is not None:
                    close()
            cleanup()


def _choose(cameras: list, plugin: str, wanted: str) -> Any:
    """The camera ``--camera PLUGIN[:NAME]`` names among the plugin's ``cameras``."""
    names = [c.name for c in cameras]
    if wanted:
        chosen = [c for c in cameras if c.name == wanted]
        if not chosen:
            raise UsageError(f"plugin {plugin!r} has no camera {wanted!r}; its cameras: "
                             f"{', '.join(names) or 'none'}")
        return chosen[0]
    if len(cameras) == 1:
        return cameras[0]
    raise UsageError(f"plugin {plugin!r} provides {len(cameras)} cameras "
                     f"({', '.join(names)}); pick one with --camera {plugin}:NAME")


def _record(args: argparse.Namespace, plugin: str, camera: Any, writer_type: Any,
            check_stop: Callable[[], None]) -> int:
    progress = sys.stderr.isatty()
    sub = camera.subscribe("record", maxlen=max(1, int(getattr(camera, "buffers", 4))))
    writer = None
    first_id = last_id = None
    interrupted = finished_ok = False
    started = time.monotonic()
    try:
        writer = writer_type(args.out, camera.layout, camera=camera.name, source=plugin,
                             overwrite=args.force)
        camera.start()
        last_frame = time.monotonic()
        while writer.frames < args.frames:
            check_stop()  # StopRequested, a KeyboardInterrupt
            lease = sub.recv(0.2)
            if lease is None:
                error = getattr(camera, "error", None)
                if error is not None:
                    raise CameraError(f"camera {camera.name!r} stopped: {error}",
                                      camera=camera.name)
                finished = getattr(camera, "finished", None)
                if finished is not None and finished.is_set() and not sub.pending():
                    break  # the source ended (a replay without loop)
                if time.monotonic() - last_frame > args.timeout:
                    raise CameraError(f"camera {camera.name!r} produced no frame for "
                                      f"{args.timeout:g} s", camera=camera.name)
                continue
            last_frame = time.monotonic()
            with lease:
                writer.write_lease(lease)
            if first_id is None:
                first_id = lease.frame.frame_id
            last_id = lease.frame.frame_id
            if progress:
                print(f"\rrecording {camera.name}: {writer.frames}/{args.frames} frames",
                      end="", file=sys.stderr, flush=True)
        finished_ok = True
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if progress:
            print(file=sys.stderr)
        camera.stop()
        sub.close()
        # keep the file on success, or on Ctrl-C with frames in it; never a partial file
        if writer is not None and (not (finished_ok or interrupted) or writer.frames == 0):
            writer.abort()
    if writer is None or writer.frames == 0:
        if interrupted:
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        raise CameraError(f"camera {camera.name!r} produced no frame", camera=camera.name)
    writer.close()
    stats = camera.pool.stats() if getattr(camera, "pool", None) is not None else {}
    lost = {k: v for k, v in stats.get("dropped", {}).items() if v}
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
    print(f"recorded {writer.frames} frame(s) of camera {camera.name!r} "
          f"({camera.layout.describe()}), frame ids {first_id}..{last_id}, to {args.out}: "
          f"{writer.bytes / 1e6:.1f} MB in {time.monotonic() - started:.1f} s; camera dropped "
          f"{sum(lost.values())}{f' ({reasons})' if reasons else ''}")
    if writer.frames < args.frames and not interrupted:
        print(f"the camera's source ended after {writer.frames} of {args.frames} frames",
              file=sys.stderr)
    if interrupted:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _partials(out: str) -> list[str]:
    """The ``.partial`` files that recordings to ``out`` left behind (killed outright)."""
    folder, name = os.path.split(out)
    try:
        entries = os.listdir(folder or ".")
    except OSError:
        return []
    return sorted(os.path.join(folder, e) for e in entries
                  if e.startswith(f".{name}.") and e.endswith(".partial"))


def _note_leftovers(out: str) -> None:
    for path in _partials(out):
        print(f"note: {path} is left from a recording to {out} that was killed before it "
              f"finished; 'plugin-host record --salvage {path} --out FILE' keeps its frames",
              file=sys.stderr)


def _salvage(args: argparse.Namespace) -> int:
    from ..frames import salvage

    if not args.force and os.path.exists(args.out):
        raise UsageError(f"{args.out} already exists (use --force to overwrite it)")

    def show(done: int, total: int) -> None:
        print(f"\rchecking {args.salvage}: {100 * done // max(total, 1)} %", end="",
              file=sys.stderr, flush=True)

    progress = show if sys.stderr.isatty() else None
    try:
        kept = salvage(args.salvage, args.out, overwrite=args.force, progress=progress)
    finally:
        if progress is not None:
            print(file=sys.stderr)
    print(f"salvaged {kept.frames} frame(s), frame ids {kept.first_id}..{kept.last_id}, "
          f"{kept.kept_bytes / 1e6:.1f} MB, to {args.out}"
          + (f"; dropped the last {kept.dropped_bytes} byte(s): {kept.reason}"
             if kept.reason is not None else "; the file was whole"))
    return 0
