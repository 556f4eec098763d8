"""Reading a camera plugin's ``[plugin.config]`` table: typed keys, ranges, several cameras.

A table configures one camera with its keys, or several with ``cameras = [{...}, {...}]``:
each entry of ``cameras`` takes the keys of one camera, and keys at the top level are the
defaults every entry inherits. Unknown keys, wrong types and values out of range are refused
with :class:`~plugin_host.errors.CameraConfigError` naming the plugin, the entry and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from plugin_host.errors import CameraConfigError


@dataclass(frozen=True)
class Key:
    """One configuration key: accepted ``types``, ``default`` (``REQUIRED``: none), and a
    ``check(value) -> problem or None``."""

    types: tuple[type, ...]
    default: Any
    check: Callable[[Any], str | None] | None = None


REQUIRED = object()


def one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def in_range(low: float | None, high: float | None, *, low_open: bool = False
             ) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if v is None:
            return None
        if (low is not None and (v <= low if low_open else v < low)) or \
                (high is not None and v > high):
            left = "(" if low_open else "["
            return f"must be in {left}{low}, {high}]"
        return None
    return check


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    if float in types and isinstance(value, int):
        return True
    return isinstance(value, types)


def _type_names(types: tuple[type, ...]) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             type(None): "absent"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def camera_configs(plugin: str, table: Mapping[str, Any] | None,
                   schema: Mapping[str, Key]) -> list[dict[str, Any]]:
    """Every camera's settings from ``table`` (see the module docstring), defaults filled in."""
    table = dict(table or {})
    has_list = "cameras" in table
    entries: Any = table.pop("cameras", None) if has_list else [{}]
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) or not entries:
        raise CameraConfigError(f"plugin {plugin!r}: config.cameras must be a non-empty list "
                                f"of tables", camera=None)
    base = _read(plugin, "config", table, schema, defaults=None)
    out, names = [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise CameraConfigError(f"plugin {plugin!r}: config.cameras[{i}] must be a table",
                                    camera=None)
        where = f"config.cameras[{i}]" if has_list else "config"
        settings = _read(plugin, where, dict(entry), schema, defaults=base)
        name = settings.get("name")
        if name in names:
            raise CameraConfigError(f"plugin {plugin!r}: two cameras are named {name!r}",
                                    camera=name)
        names.add(name)
        out.append(settings)
    return out


def _read(plugin: str, where: str, table: dict[str, Any], schema: Mapping[str, Key],
          defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    unknown = sorted(set(table) - set(schema))
    if unknown:
        raise CameraConfigError(f"plugin {plugin!r}: {where}: unknown key(s) "
                                f"{', '.join(unknown)} (known: {', '.join(sorted(schema))}, "
                                f"cameras)", camera=None)
    out: dict[str, Any] = {}
    for key, spec in schema.items():
        if key in table:
            value = table[key]
            if not _type_ok(value, spec.types):
                raise CameraConfigError(f"plugin {plugin!r}: {where}.{key} must be "
                                        f"{_type_names(spec.types)}, got {value!r}",
                                        camera=None)
            if isinstance(value, int) and not isinstance(value, bool) and float in spec.types \
                    and int not in spec.types:
                value = float(value)
            problem = spec.check(value) if spec.check else None
            if problem:
                raise CameraConfigError(f"plugin {plugin!r}: {where}.{key} {problem}, got "
                                        f"{value!r}", camera=None)
        elif defaults is not None and key in defaults:
            value = defaults[key]
        elif spec.default is REQUIRED:
            if defaults is None:
                continue  # may come from each camera entry
            raise CameraConfigError(f"plugin {plugin!r}: {where}.{key} is required",
                                    camera=None)
        else:
            value = spec.default
        out[key] = value
    return out


def publisher_of(config: Mapping[str, Any] | None) -> Any:
    """The plugin's ``camera.publish`` capability when granted, else None (asking only:
    no denial is recorded for a plugin that does not hold it)."""
    caps = (config or {}).get("capabilities")
    getter = getattr(caps, "get", None)
    return getter("camera.publish") if getter is not None else None
