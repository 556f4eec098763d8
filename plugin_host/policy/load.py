"""Reading a policy file: TOML (``tomllib``) into :class:`~plugin_host.policy.model.Policy`.

Every key is checked: unknown keys, missing required keys, wrong types, unknown kinds,
capabilities, roles, protections and values out of range are problems. Every problem names the
file, the line (found by :class:`~plugin_host.policy.locate.Locator`) and the key path. The
semantic checks of :mod:`plugin_host.policy.check` run on whatever parsed, and then one
:class:`~plugin_host.errors.PolicyError` carries every problem found.

The schema, in brief (``policies/demo.toml`` and ``policies/device.example.toml`` show it with
comments; README "Policy files" describes it)::

    format = 1
    [audit]        log = PATH, fsync = BOOL
    [trust]        default_threshold = K, revoked = [KEY_ID, ...], thresholds = {NAME = K}
    [[trust.key]]  file = PATH, roles = ["artifact"], label = STR
    [[artifact]]   name, file = PATH, backend, min_version = "X.Y.Z", acceptance_required,
                   acceptance = PATH (the acceptance record; default FILE.accept-BACKEND),
                   fixed_inputs = {INPUT = NUMBER | BOOL | [...], ...},
                   camera_inputs = {INPUT = CAMERA, ...},
                   image_inputs = {INPUT = "rgb" | "bgr" | {color, scale, mean, std, fit,
                                   pad, resize, crop_fraction}, ...}
    [[plugin]]     name, kind, capabilities = [...], deny = [...], kernels = [OP, ...],
                   config = {...}
    [[audited_op]] op, version, audit = STR, backends = [...]
    [sandbox]      require = [PROTECTION, ...]
    [limits]       memory_mb, cpu_seconds, open_files, call_timeout_ms, artifact_max_mb, cpu
    [deny]         plugins = [...], capabilities = [...]
    [can]          interface = "virtual" | "socketcan", channel, bitrate
    [panda]        provider = "simulated", allowed_modes = [...]
    [cameras]      use = [CAMERA, ...], max_skew_ms = MS, stall_ms = MS (the daemon's
                   cameras)

Paths may use ``${STATE_DIR}`` and ``${POLICY_DIR}``; relative paths are relative to the
policy file's directory.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable

import numpy as np

from abi.artifact import parse_version
from abi.spec import MAX_RANK
from abi.errors import ArtifactFormatError

from ..errors import PolicyError, PolicyProblem
from ..files import open_regular
from ..frames.rgb import FIELDS, RgbFormat
from . import model as m
from .locate import Locator, format_key

__all__ = ["load_policy", "parse_policy", "MAX_POLICY_BYTES"]

MAX_POLICY_BYTES = 1 << 20

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_KNOWN_PLACEHOLDERS = {"STATE_DIR", "POLICY_DIR"}
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")  # entry-point and artifact names
_KEY_ID = re.compile(r"[0-9a-f]{32}")
_MISSING = object()


def load_policy(path: str | os.PathLike, *, state_dir: str | os.PathLike | None = None
                ) -> m.Policy:
    """Read, parse and check the policy file at ``path``; raise PolicyError listing every
    problem. ``state_dir`` overrides what ``${STATE_DIR}`` expands to."""
    name = os.fspath(path)
    try:
        with open_regular(path) as f:
            data = f.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyError([PolicyProblem(name, 0, "", f"cannot read the policy file: "
                                                      f"{exc.strerror}")]) from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError([PolicyProblem(name, 0, "", f"larger than {MAX_POLICY_BYTES} bytes")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise PolicyError([PolicyProblem(name, line, "", "not UTF-8 text")]) from None
    return parse_policy(text, path=name, state_dir=state_dir)


def parse_policy(text: str, *, path: str = "<policy>",
                 state_dir: str | os.PathLike | None = None) -> m.Policy:
    """Parse and check policy ``text``; ``path`` names it in errors and anchors relative
    paths (its directory)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = int(match[1]) if match else 0
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise PolicyError([PolicyProblem(path, line, "", f"not valid TOML: {message}")]
                          ) from None
    reader = _Reader(path, Locator(text), Path(os.path.abspath(path)).parent,
                     None if state_dir is None else Path(state_dir))
    policy = reader.policy(raw)
    if policy is not None:
        from .check import check_policy

        check_policy(policy, reader.problem, incomplete=reader.incomplete)
    if reader.problems:
        raise PolicyError(_sorted(reader.problems), path=path)
    assert policy is not None
    return policy


def _sorted(problems: list[PolicyProblem]) -> list[PolicyProblem]:
    seen, unique = set(), []
    for p in problems:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return sorted(unique, key=lambda p: p.line)


class _Reader:
    """Turns the parsed TOML into model objects, collecting problems instead of stopping."""

    def __init__(self, path: str, locator: Locator, policy_dir: Path,
                 state_dir: Path | None) -> None:
        self.path, self.locator = path, locator
        self.policy_dir, self.state_dir = policy_dir, state_dir
        self.problems: list[PolicyProblem] = []
        #: sections with an entry dropped for its problems (cross-checks on them would only
        #: repeat those problems)
        self.incomplete: set[str] = set()

    # -- reporting ------------------------------------------------------------------------------

    def problem(self, key: tuple, message: str) -> None:
        self.problems.append(PolicyProblem(self.path, self.locator.line(key), format_key(key),
                                           message))

    def line(self, key: tuple) -> int:
        return self.locator.line(key)

    # -- typed getters --------------------------------------------------------------------------

    def table(self, key: tuple, value: Any, allowed: Iterable[str],
              required: Iterable[str] = ()) -> dict | None:
        """``value`` as a table with only ``allowed`` keys and every ``required`` one."""
        if not isinstance(value, dict):
            self.problem(key, f"must be a table, got {_type(value)}")
            return None
        allowed = tuple(allowed)
        for k in value:
            if k not in allowed:
                self.problem(key + (k,), f"unknown key {k!r} (allowed here: "
                                         f"{', '.join(allowed)})")
        for k in required:
            if k not in value:
                self.problem(key, f"missing required key {k!r}")
        return value

    def get(self, table: dict, key: tuple, kind: type | tuple, default: Any = _MISSING,
            check: Callable[[Any], str | None] | None = None) -> Any:
        """``table[key[-1]]`` of type ``kind`` (bool is not an int), else a problem + None."""
        name = key[-1]
        if name not in table:
            return None if default is _MISSING else default
        value = table[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = any(type(value) is k or (k is float and type(value) is int) for k in kinds)
        if not ok:
            self.problem(key, f"must be {_names(kinds)}, got {_type(value)}")
            return None
        if check is not None:
            error = check(value)
            if error:
                self.problem(key, error)
                return None
        return float(value) if float in kinds and int not in kinds else value

    def str_list(self, table: dict, key: tuple, choices: Iterable[str] | None = None,
                 what: str = "value", pattern: re.Pattern | None = None) -> list[str] | None:
        """A list of unique strings, each in ``choices`` (or matching ``pattern``) if given."""
        value = self.get(table, key, list, default=[])
        if value is None:
            return None
        choices = None if choices is None else tuple(choices)
        out: list[str] = []
        for i, item in enumerate(value):
            if type(item) is not str:
                self.problem(key, f"item {i} must be a string, got {_type(item)}")
            elif choices is not None and item not in choices:
                self.problem(key, f"unknown {what} {item!r} (known: {', '.join(choices)})")
            elif pattern is not None and not pattern.fullmatch(item):
                self.problem(key, f"{item!r} is not a valid {what}")
            elif item in out:
                self.problem(key, f"{what} {item!r} is listed twice")
            else:
                out.append(item)
        return out

    def path_value(self, table: dict, key: tuple, required: bool = True) -> Path | None:
        value = self.get(table, key, str)
        if value is None:
            return None
        if not value:
            self.problem(key, "must not be empty")
            return None
        unknown = [v for v in _PLACEHOLDER.findall(value) if v not in _KNOWN_PLACEHOLDERS]
        if unknown:
            self.problem(key, f"unknown placeholder(s) {', '.join('${' + u + '}' for u in unknown)}"
                              f" (known: ${{STATE_DIR}}, ${{POLICY_DIR}})")
            return None
        return m.expand_path(value, policy_dir=self.policy_dir, state_dir=self.state_dir)

    def array_of_tables(self, raw: dict, key: str) -> list[tuple[int, dict]]:
        value = raw.get(key, [])
        if not isinstance(value, list):
            self.problem((key,), f"must be an array of tables ([[{key}]]), got {_type(value)}")
            return []
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                self.problem((key, i), f"must be a table ([[{key}]]), got {_type(item)}")
            else:
                out.append((i, item))
        return out

    def entries(self, raw: dict, key: str, parse: Callable[[int, dict], Any]) -> tuple:
        """Every ``[[key]]`` entry parsed; a dropped one marks the section incomplete."""
        out = []
        for i, t in self.array_of_tables(raw, key):
            entry = parse(i, t)
            if entry is None:
                self.incomplete.add(key)
            else:
                out.append(entry)
        if isinstance(raw.get(key, []), list) and len(out) != len(raw.get(key, [])):
            self.incomplete.add(key)
        return tuple(out)

    def unique_names(self, raw: dict, key: str) -> None:
        """Report every ``[[key]]`` entry whose ``name`` repeats an earlier one's."""
        first: dict[str, int] = {}
        items = raw.get(key, [])
        for i, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if type(name) is not str:
                continue
            if name in first:
                self.problem((key, i, "name"), f"duplicate {key} name {name!r} (first at line "
                                               f"{self.line((key, first[name], 'name'))})")
            else:
                first[name] = i

    # -- the sections ---------------------------------------------------------------------------

    def policy(self, raw: dict) -> m.Policy | None:
        top = self.table((), raw, ("format", "audit", "trust", "artifact", "plugin",
                                   "audited_op", "sandbox", "limits", "deny", "can", "panda",
                                   "cameras"),
                         required=("format",))
        assert top is not None
        fmt = self.get(raw, ("format",), int)
        if fmt is not None and fmt != m.FORMAT:
            self.problem(("format",), f"policy format {fmt} is not supported (this host reads "
                                      f"format {m.FORMAT})")
        self.unique_names(raw, "plugin")
        self.unique_names(raw, "artifact")
        return m.Policy(
            path=self.path,
            audit=self.audit(raw.get("audit", {})),
            trust=self.trust(raw.get("trust", {})),
            artifacts=self.entries(raw, "artifact", self.artifact),
            plugins=self.entries(raw, "plugin", self.plugin),
            audited_ops=self.entries(raw, "audited_op", self.audited_op),
            sandbox=self.sandbox(raw.get("sandbox", {})),
            limits=self.limits(raw.get("limits", {})),
            deny=self.deny(raw.get("deny", {})),
            can=self.can(raw.get("can", {})),
            panda=self.panda(raw.get("panda", {})),
            cameras=self.cameras(raw.get("cameras", {})),
        )

    def audit(self, raw: Any) -> m.AuditSettings:
        key = ("audit",)
        default = m.AuditSettings(m.expand_path("${STATE_DIR}/audit.jsonl",
                                                policy_dir=self.policy_dir,
                                                state_dir=self.state_dir))
        t = self.table(key, raw, ("log", "fsync"))
        if t is None:
            return default
        log = self.path_value(t, key + ("log",)) if "log" in t else default.log
        fsync = self.get(t, key + ("fsync",), bool, default=False)
        return m.AuditSettings(log=log or default.log, fsync=bool(fsync),
                               line=self.locator.exact(key) or 0)

    def trust(self, raw: Any) -> m.TrustPolicy:
        key = ("trust",)
        t = self.table(key, raw, ("default_threshold", "revoked", "thresholds", "key"))
        if t is None:
            return m.TrustPolicy()
        default = self.get(t, key + ("default_threshold",), int, default=1, check=_at_least(1))
        revoked = self.str_list(t, key + ("revoked",), what="key id", pattern=_KEY_ID) or []
        thresholds: dict[str, int] = {}
        raw_thresholds = t.get("thresholds", {})
        if not isinstance(raw_thresholds, dict):
            self.problem(key + ("thresholds",), f"must be a table of artifact name = k, got "
                                               f"{_type(raw_thresholds)}")
        else:
            for name in raw_thresholds:
                k = self.get(raw_thresholds, key + ("thresholds", name), int,
                             check=_at_least(1))
                if k is not None:
                    thresholds[name] = k
        keys = []
        for i, kt in self.array_of_tables(t, "key"):
            kkey = key + ("key", i)
            kt = self.table(kkey, kt, ("file", "roles", "label"), required=("file", "roles"))
            if kt is None:
                continue
            file = self.path_value(kt, kkey + ("file",))
            roles = self.str_list(kt, kkey + ("roles",), choices=m.ROLES, what="role")
            if kt.get("roles") == []:
                self.problem(kkey + ("roles",), "a trusted key needs at least one role")
            label = self.get(kt, kkey + ("label",), str, default="")
            if file is not None and roles:
                keys.append(m.TrustKey(file=file, roles=frozenset(roles), label=label or "",
                                       line=self.line(kkey), index=i))
            else:
                self.incomplete.add("trust")
        return m.TrustPolicy(keys=tuple(keys), revoked=frozenset(revoked),
                             default_threshold=default or 1,
                             thresholds=MappingProxyType(thresholds))

    def artifact(self, i: int, t: dict) -> m.ArtifactRule | None:
        key = ("artifact", i)
        self.table(key, t, ("name", "file", "backend", "min_version", "acceptance_required",
                            "acceptance", "fixed_inputs", "camera_inputs", "image_inputs"),
                   required=("name", "file", "backend"))
        name = self.get(t, key + ("name",), str, check=_name_check("artifact name"))
        file = self.path_value(t, key + ("file",))
        backend = self.get(t, key + ("backend",), str, check=_non_empty)
        min_version = None
        raw_version = self.get(t, key + ("min_version",), str)
        if raw_version is not None:
            try:
                min_version = parse_version(raw_version, "min_version")
            except ArtifactFormatError:
                self.problem(key + ("min_version",), f"{raw_version!r} is not a semantic "
                                                     f"version MAJOR.MINOR.PATCH")
        acceptance = self.get(t, key + ("acceptance_required",), bool, default=True)
        record = self.path_value(t, key + ("acceptance",)) if "acceptance" in t else None
        fixed = self.fixed_inputs(t, key + ("fixed_inputs",))
        cameras = self.camera_inputs(t, key + ("camera_inputs",))
        images = self.image_inputs(t, key + ("image_inputs",))
        for both in set(fixed) & set(cameras):
            self.problem(key + ("fixed_inputs", both), f"input {both!r} is also in "
                                                      f"camera_inputs: it has one source")
        for both in set(fixed) & set(images):
            self.problem(key + ("image_inputs", both), f"input {both!r} is also in "
                                                      f"fixed_inputs: it has one source")
        if cameras:
            for name in set(images) - set(cameras):
                self.problem(key + ("image_inputs", name),
                             f"input {name!r} is not in camera_inputs, which names the camera "
                             f"of every image input of this [[artifact]]")
        elif len(images) > 1:
            self.problem(key + ("image_inputs",), f"names {len(images)} inputs, but a model "
                                                  f"without camera_inputs takes one image: name "
                                                  f"each one's camera in camera_inputs")
        if name is None or file is None or backend is None:
            return None
        return m.ArtifactRule(name=name, file=file, backend=backend, min_version=min_version,
                              acceptance_required=bool(acceptance) if acceptance is not None
                              else True, line=self.line(key), index=i, acceptance=record,
                              fixed_inputs=fixed, camera_inputs=cameras,
                              camera_inputs_line=self.line(key + ("camera_inputs",))
                              if "camera_inputs" in t else 0, image_inputs=images)

    def image_inputs(self, t: dict, key: tuple) -> Any:
        """``image_inputs``: a table of image input name = its colour image's format, a colour
        order (``"rgb"`` or ``"bgr"``) or a table of ``color``, ``scale``, ``mean``, ``std``,
        ``fit``, ``pad``, ``resize`` and ``crop_fraction``
        (:class:`~plugin_host.frames.RgbFormat`); each with the line it is on."""
        fields = ", ".join(FIELDS)
        raw = t.get(key[-1], {})
        if not isinstance(raw, dict):
            self.problem(key, f"must be a table of input name = \"rgb\", \"bgr\" or a table "
                              f"of {fields}, got {_type(raw)}")
            return MappingProxyType({})
        out: dict[str, m.ImageInput] = {}
        for name, value in raw.items():
            if not name.strip():
                self.problem(key, "an input name must not be empty")
                continue
            where = key + (name,)
            if isinstance(value, str):
                value = {"color": value}
            if not isinstance(value, dict):
                self.problem(where, f"must be \"rgb\", \"bgr\" or a table of {fields}, got "
                                    f"{_type(value)}")
                continue
            if any(k not in FIELDS for k in self.table(where, value, FIELDS)):
                continue  # the unknown keys are the problems
            try:
                fmt = RgbFormat(**value)
            except (TypeError, ValueError) as exc:
                field = next((f for f in FIELDS if str(exc).startswith(f)), None)
                self.problem(where + ((field,) if field in value else ()), str(exc))
                continue
            out[name] = m.ImageInput(fmt, self.line(where))
        return MappingProxyType(out)

    def camera_inputs(self, t: dict, key: tuple) -> Any:
        """``camera_inputs``: a table of image input name = camera name, each camera once."""
        raw = t.get(key[-1], {})
        if not isinstance(raw, dict):
            self.problem(key, f"must be a table of input name = camera name, got {_type(raw)}")
            return MappingProxyType({})
        out: dict[str, str] = {}
        for name, camera in raw.items():
            if not name.strip():
                self.problem(key, "an input name must not be empty")
                continue
            camera = self.get(raw, key + (name,), str, check=_name_check("camera name"))
            if camera is None:
                continue
            if camera in out.values():
                first = next(k for k, v in out.items() if v == camera)
                self.problem(key + (name,), f"camera {camera!r} already makes input {first!r}: "
                                            f"a camera's frames make one input")
                continue
            out[name] = camera
        return MappingProxyType(out)

    def fixed_inputs(self, t: dict, key: tuple) -> Any:
        """``fixed_inputs``: a table of input name = value. The values are only checked for
        form here; their shapes and dtypes are the artifact's, checked when it loads."""
        raw = t.get(key[-1], {})
        if not isinstance(raw, dict):
            self.problem(key, f"must be a table of input name = value, got {_type(raw)}")
            return MappingProxyType({})
        out = {}
        for name, value in raw.items():
            if not name.strip():
                self.problem(key, "an input name must not be empty")
                continue
            array = _input_value(value)
            if isinstance(array, str):
                self.problem(key + (name,), array)
            else:
                out[name] = m.FixedInput(array, self.line(key + (name,)))
        return MappingProxyType(out)

    def plugin(self, i: int, t: dict) -> m.PluginRule | None:
        key = ("plugin", i)
        self.table(key, t, ("name", "kind", "capabilities", "deny", "kernels", "config"),
                   required=("name", "kind"))
        name = self.get(t, key + ("name",), str, check=_name_check("plugin name"))
        kind = self.get(t, key + ("kind",), str, check=_choice(m.KINDS, "plugin kind"))
        caps = self.str_list(t, key + ("capabilities",), choices=m.CAPABILITIES,
                             what="capability")
        deny = self.str_list(t, key + ("deny",), choices=m.CAPABILITIES, what="capability")
        kernels = self.str_list(t, key + ("kernels",), what="op name",
                                pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_]*"))
        config = t.get("config", {})
        if not isinstance(config, dict):
            self.problem(key + ("config",), f"must be a table, got {_type(config)}")
            config = {}
        if name is None or kind is None:
            return None
        return m.PluginRule(name=name, kind=kind, capabilities=frozenset(caps or ()),
                            deny=frozenset(deny or ()), kernels=frozenset(kernels or ()),
                            config=m.freeze_table(config), line=self.line(key), index=i)

    def audited_op(self, i: int, t: dict) -> m.AuditedOp | None:
        key = ("audited_op", i)
        self.table(key, t, ("op", "version", "audit", "backends"),
                   required=("op", "version", "audit"))
        op = self.get(t, key + ("op",), str, check=_non_empty)
        version = self.get(t, key + ("version",), int, check=_at_least(1))
        audit = self.get(t, key + ("audit",), str, check=_non_empty)
        backends = self.str_list(t, key + ("backends",), what="backend name")
        if op is None or version is None or audit is None:
            return None
        return m.AuditedOp(op=op, version=version, audit=audit,
                           backends=frozenset(backends or ()), line=self.line(key), index=i)

    def sandbox(self, raw: Any) -> m.SandboxRequirements:
        key = ("sandbox",)
        t = self.table(key, raw, ("require",))
        if t is None:
            return m.SandboxRequirements()
        require = self.str_list(t, key + ("require",), choices=m.PROTECTIONS,
                                what="protection") or []
        return m.SandboxRequirements(require=frozenset(require),
                                     line=self.locator.exact(key) or 0)

    def limits(self, raw: Any) -> m.Limits:
        key = ("limits",)
        t = self.table(key, raw, ("memory_mb", "cpu_seconds", "open_files", "call_timeout_ms",
                                  "artifact_max_mb", "cpu"))
        if t is None:
            return m.Limits()
        d = m.Limits()
        values = {}
        for name in ("memory_mb", "cpu_seconds", "open_files", "artifact_max_mb"):
            v = self.get(t, key + (name,), int, default=getattr(d, name),
                         check=_between(1, _LIMIT_MAX[name]))
            values[name] = getattr(d, name) if v is None else v
        v = self.get(t, key + ("call_timeout_ms",), float, default=d.call_timeout_ms,
                     check=_call_timeout)
        values["call_timeout_ms"] = d.call_timeout_ms if v is None else float(v)
        values["cpu"] = self.get(t, key + ("cpu",), (int, str), default=d.cpu, check=_cpu)
        return m.Limits(**values, line=self.locator.exact(key) or 0)

    def deny(self, raw: Any) -> m.DenyRules:
        key = ("deny",)
        t = self.table(key, raw, ("plugins", "capabilities"))
        if t is None:
            return m.DenyRules()
        plugins = self.str_list(t, key + ("plugins",), what="plugin name", pattern=_NAME) or []
        caps = self.str_list(t, key + ("capabilities",), choices=m.CAPABILITIES,
                             what="capability") or []
        return m.DenyRules(plugins=frozenset(plugins), capabilities=frozenset(caps),
                           line=self.locator.exact(key) or 0)

    def can(self, raw: Any) -> m.CanSettings:
        key = ("can",)
        t = self.table(key, raw, ("interface", "channel", "bitrate"))
        if t is None:
            return m.CanSettings()
        d = m.CanSettings()
        interface = self.get(t, key + ("interface",), str, default=d.interface,
                             check=_choice(m.CAN_INTERFACES, "CAN interface"))
        channel = self.get(t, key + ("channel",), str, default=d.channel, check=_non_empty)
        bitrate = self.get(t, key + ("bitrate",), int, default=None, check=_at_least(1))
        return m.CanSettings(interface=interface or d.interface, channel=channel or d.channel,
                             bitrate=bitrate, line=self.locator.exact(key) or 0)

    def panda(self, raw: Any) -> m.PandaSettings:
        key = ("panda",)
        t = self.table(key, raw, ("provider", "allowed_modes"))
        if t is None:
            return m.PandaSettings()
        d = m.PandaSettings()
        provider = self.get(t, key + ("provider",), str, default=d.provider,
                            check=_choice(m.PANDA_PROVIDERS, "panda provider"))
        modes = (self.str_list(t, key + ("allowed_modes",), choices=m.SAFETY_MODES,
                               what="safety mode") if "allowed_modes" in t else None)
        return m.PandaSettings(provider=provider or d.provider,
                               allowed_modes=d.allowed_modes if modes is None
                               else frozenset(modes), line=self.locator.exact(key) or 0)

    def cameras(self, raw: Any) -> m.CameraSettings:
        key = ("cameras",)
        t = self.table(key, raw, ("use", "max_skew_ms", "stall_ms"))
        if t is None:
            return m.CameraSettings()
        use = self.str_list(t, key + ("use",), what="camera name", pattern=_NAME) or []
        if t.get("use") == []:
            self.problem(key + ("use",), "must list at least one camera (or leave it out: "
                                         "the one camera the policy provides)")
        skew = self.get(t, key + ("max_skew_ms",), float, default=m.DEFAULT_MAX_SKEW_MS,
                        check=_non_negative)
        stall = self.get(t, key + ("stall_ms",), float, default=None, check=_stall_ms)
        return m.CameraSettings(use=tuple(use),
                                max_skew_ms=m.DEFAULT_MAX_SKEW_MS if skew is None else skew,
                                stall_ms=stall,
                                line=self.locator.exact(key) or 0,
                                use_line=self.line(key + ("use",)) if "use" in t else 0)


# --- small value checks ----------------------------------------------------------------------


def _input_value(value: Any) -> np.ndarray | str:
    """A ``fixed_inputs`` value (a number, a boolean, or a rectangular array of arrays of
    them) as a read-only array: bool, int64, or float64 when any element is a float. Returns
    the problem as text instead when it is none of these."""
    shape: list[int] = []
    level = [value]
    while type(level[0]) is list:
        size = len(level[0])
        if size == 0:
            return "must hold at least one value (an empty array has no shape to feed)"
        if any(type(v) is not list or len(v) != size for v in level):
            return "must be rectangular: the arrays at one depth must all have one length"
        shape.append(size)
        if len(shape) > MAX_RANK:
            return f"nests deeper than the ABI's largest rank, {MAX_RANK}"
        level = [x for v in level for x in v]
    kinds = {type(v) for v in level}
    if list in kinds:
        return "must be rectangular: the arrays at one depth must all have one length"
    if not kinds <= {bool, int, float}:
        odd = next(v for v in level if type(v) not in (bool, int, float))
        return f"must hold numbers or booleans, got {_type(odd)}"
    if bool in kinds and kinds != {bool}:
        return "mixes booleans and numbers"
    if int in kinds and any(type(v) is int and not -2**63 <= v < 2**63 for v in level):
        return "holds an integer beyond the 64-bit range"
    dtype = bool if kinds == {bool} else np.float64 if float in kinds else np.int64
    array = np.array(level, dtype=dtype).reshape(shape)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return "must be finite (nan and inf are not inputs a model should be fed)"
    array.flags.writeable = False
    return array


def _type(value: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean",
            int: "an integer", float: "a float"}.get(type(value), type(value).__name__)


def _names(kinds: tuple) -> str:
    return " or ".join({str: "a string", int: "an integer", bool: "a boolean (true/false)",
                        float: "a number", list: "an array"}.get(k, k.__name__) for k in kinds)


#: the largest value of each integer [limits] key: what the kernel takes (open files: its
#: default fs.nr_open) or what fits the sandbox's own limits (a call timeout below 1e6 s)
_LIMIT_MAX = {"memory_mb": 2**40, "cpu_seconds": 2**40, "open_files": 2**20,
              "artifact_max_mb": 2**40}


def _between(low: int, high: int) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be from {low} to {high}, got {v}"


def _call_timeout(v: Any) -> str | None:
    return None if 0 < v < 1e9 else \
        f"must be a positive number of milliseconds below 1e9, got {v}"


def _at_least(low: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}, got {v}"


def _cpu(v: Any) -> str | None:
    if type(v) is str:
        return None if v in ("auto", "off") else \
            f"must be a CPU number, 'auto' or 'off', got {v!r}"
    return None if v >= 0 else f"must be a CPU number (0 or more), 'auto' or 'off', got {v}"


def _stall_ms(v: Any) -> str | None:
    return None if 0 < v <= 3.6e6 else \
        f"must be a positive number of milliseconds up to 3600000 (an hour), got {v}"


def _non_negative(v: Any) -> str | None:
    return None if 0 <= v < float("inf") else f"must be 0 or a positive number, got {v}"


def _non_empty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


def _choice(choices: tuple, what: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else (f"unknown {what} {v!r} (known: "
                                                f"{', '.join(choices)})")


def _name_check(what: str) -> Callable[[Any], str | None]:
    return lambda v: None if _NAME.fullmatch(v) else (
        f"{v!r} is not a valid {what} (letters, digits, '_', '.', '-')")
