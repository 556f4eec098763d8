"""What every verb of the command line shares: exit codes, help formatting, small helpers."""

from __future__ import annotations

import argparse
from typing import Sequence

import numpy as np

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples in each verb's epilog as written."""


def percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q)) if samples else float("nan")
