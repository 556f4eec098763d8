"""Hostile input: mutants of the shipped policy files (and of ``seeds/``, for keys the shipped
files do not use) must each load or be refused with a :class:`~plugin_host.errors.PolicyError`
(``FILE:LINE: key: problem`` lines), nothing else.

Mutations: character flips, deletions, insertions and duplicated spans of the TOML text; and
structured ones: every key path of a parsed policy in turn given a value of another kind
(ints at and past their bounds, inf and nan, empty and huge strings, path escapes, arrays,
tables, booleans, datetimes), removed, or joined by an unknown key, written back as TOML.
Each parse is guarded by an alarm. ``FUZZ_POLICY_MUTANTS`` (default 300) sets how many of the
text mutants each file gets; ``make fuzz`` runs more. ``FUZZ_SEED`` changes the sequence.
"""

from __future__ import annotations

import collections
import datetime
import json
import math
import os
import random
import signal
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

from plugin_host.errors import PolicyError
from plugin_host.policy import parse_policy

ROOT = Path(__file__).resolve().parents[3]
POLICIES = [ROOT / "policies" / "demo.toml", ROOT / "policies" / "device.example.toml",
            Path(__file__).parent / "seeds" / "model_inputs.toml"]
MUTANTS = int(os.environ.get("FUZZ_POLICY_MUTANTS", "300"))
SEED = int(os.environ.get("FUZZ_SEED", "20261130"))
MAX_SECONDS = 5

_ALPHABET = '[]{}=,."\'#\n -_0123456789abcdefxyz${}/\\\t:+e'
_HOSTILE: list[Any] = [
    0, -1, 1, 2**31, 2**63 - 1, -2**63, 0.0, -0.5, 1e308, math.inf, -math.inf, math.nan,
    "", " ", "x" * 5000, "../../../../etc/passwd", "/dev/zero", "${STATE_DIR}/../..",
    "${NOPE}/x", "${POLICY_DIR}", "\u0000", "caf\u00e9", "a b", True, False, [], [[]], [1, "x"],
    ["a"] * 300, {}, {"x": 1}, {"name": {"name": {}}},
    datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), datetime.date(2026, 1, 1),
]


class _Hang(BaseException):
    """Raised by the alarm: never taken for a refusal."""


def _toml(value: Any) -> str:
    """``value`` as a TOML value (tables inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's escapes are TOML basic-string escapes
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    raise AssertionError(f"no TOML for {value!r}")


def _document(raw: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k)} = {_toml(v)}\n" for k, v in raw.items())


def _paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every key path (and list index) in a parsed policy."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k,)
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path + (i,)
            yield from _paths(v, path + (i,))


def _replaced(raw: Any, path: tuple, new: Any, *, delete: bool = False) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    out = dict(raw) if isinstance(raw, dict) else list(raw)
    if delete and not rest:
        del out[head]
    else:
        out[head] = _replaced(raw[head], rest, new, delete=delete)
    return out


def _text_mutant(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(chars) + 1)
        kind = rng.randrange(4)
        if kind == 0 and at < len(chars):
            chars[at] = rng.choice(_ALPHABET)
        elif kind == 1 and at < len(chars):
            del chars[at:at + rng.randint(1, 40)]
        elif kind == 2:
            chars[at:at] = rng.choices(_ALPHABET, k=rng.randint(1, 8))
        else:
            span = chars[at:at + rng.randint(1, 200)]
            chars[at:at] = span
    return "".join(chars)


def _check(text: str, path: Path, state: Path, what: str) -> str:
    """``text`` parses ("loaded"), or is refused with a PolicyError whose every line names
    the file ("refused")."""
    def hang(*_: Any) -> None:
        raise _Hang

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(MAX_SECONDS)
    try:
        parse_policy(text, path=str(path), state_dir=state)
        return "loaded"
    except PolicyError as exc:
        message = str(exc)
        assert message.strip(), what
        for problem in exc.problems:
            assert str(problem).startswith(f"{path}:"), (what, str(problem))
            assert "\n" not in str(problem), (what, str(problem))
        return "refused"
    except _Hang:
        pytest.fail(f"{what}: no answer in {MAX_SECONDS} s")
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{what}: {type(exc).__name__}: {exc}\n--- policy ---\n{text[:3000]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("source", POLICIES, ids=lambda p: p.name)
def test_text_mutants_load_or_are_refused_with_a_policy_error(source, tmp_path):
    text = source.read_text()
    path = tmp_path / source.name  # relative paths in the policy resolve beside it
    rng = random.Random(f"{SEED}:{source.name}")
    seen = collections.Counter(
        _check(_text_mutant(text, rng), path, tmp_path / "state",
               f"{source.name} text mutant {i} (FUZZ_SEED={SEED})") for i in range(MUTANTS))
    assert seen["refused"] > MUTANTS // 4, seen  # the mutants reach the checks


@pytest.mark.parametrize("source", POLICIES, ids=lambda p: p.name)
def test_every_key_given_hostile_values_loads_or_is_refused(source, tmp_path):
    raw = tomllib.loads(source.read_text())
    path = tmp_path / source.name
    assert _check(_document(raw), path, tmp_path / "state", "rewritten") == "loaded"
    rng = random.Random(f"{SEED}:{source.name}:keys")
    for key_path in _paths(raw):
        where = ".".join(map(str, key_path))
        for value in rng.sample(_HOSTILE, 6):
            _check(_document(_replaced(raw, key_path, value)), path, tmp_path / "state",
                   f"{source.name} {where} = {value!r:.60}")
        _check(_document(_replaced(raw, key_path, None, delete=True)), path,
               tmp_path / "state", f"{source.name} without {where}")
        parent = key_path[:-1]
        if not parent or isinstance(key_path[-1], str):
            container = raw
            for k in parent:
                container = container[k]
            if isinstance(container, dict):
                extra = {**container, "unknown_key": 1}
                _check(_document(_replaced(raw, parent, extra) if parent else extra), path,
                       tmp_path / "state", f"{source.name} {where} beside an unknown key")
