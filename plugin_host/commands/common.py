"""What every verb of the command line shares: help formatting, small helpers (the exit codes
are :mod:`plugin_host.cli`'s)."""

from __future__ import annotations

import argparse
import functools
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..stop_signals import deferred_stop


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in each verb's epilog as written."""


def state_folder(given: str | None, *, default: bool = True) -> Path | None:
    """``--state-dir`` as an absolute path: a relative one is relative to the working folder
    (not to the policy file's, as the policy's own relative paths are). Not given: the default
    state folder, or None when ``default`` is false (the policy then uses its own default).
    A path that exists and is not a folder is a UsageError."""
    from ..artifacts import default_state_dir
    from ..errors import UsageError

    if given is None:
        return default_state_dir() if default else None
    path = Path(os.path.abspath(given))
    if path.exists() and not path.is_dir():
        raise UsageError(f"--state-dir {given}: not a folder")
    return path


def stops_between_steps(verb: Callable[[argparse.Namespace], int]
                        ) -> Callable[[argparse.Namespace], int]:
    """A long verb: run inside :func:`~plugin_host.stop_signals.deferred_stop`, so that a first
    SIGTERM or Ctrl-C is acted on at its next step (each progress message checks it) instead of
    landing as an exception inside whatever library code runs; a second one raises at once."""
    @functools.wraps(verb)
    def deferred(args: argparse.Namespace) -> int:
        with deferred_stop():
            return verb(args)
    return deferred


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")
