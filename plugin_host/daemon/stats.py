"""Per-frame statistics: model execution time, frame age, and openpilot's filtered drop rate.

openpilot's modeld reports in every ``modelV2`` message ``frameDropPerc``: the frames dropped
before this one (the ``frame_id`` gap minus one, capped at 10) through a first-order low-pass
filter (time constant 1 s, step one model period), turned into a ratio ``d / (1 + d)`` and a
percentage, held at 0 for the first 10 frames. :class:`FrameStats` does the same, with the
step the camera's frame period. It also keeps every sample of the run for the summary
(p50/p99 over the last :data:`MAX_SAMPLES` frames, max over all).

``model_execution_ms``: the host's wall time of one sandboxed call (input hand-over, the
worker's run, outputs back and checked). ``frame_age_ms``: from the frame's ``timestamp_eof``
(when it was complete) to the moment its outputs are published.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FirstOrderFilter", "FrameStats", "FrameReport", "percentiles"]

#: openpilot: frames dropped per step are capped at this before filtering
MAX_DROPS_PER_FRAME = 10
#: openpilot: the filter is held at zero for this many first frames
WARMUP_FRAMES = 10
#: samples kept for the percentiles (the last ~55 minutes at 20 Hz): memory stays flat
MAX_SAMPLES = 65536


class FirstOrderFilter:
    """``x += alpha * (u - x)`` with ``alpha = dt / (rc + dt)`` (openpilot's
    ``common.filter_simple.FirstOrderFilter``)."""

    def __init__(self, x0: float, rc: float, dt: float) -> None:
        self.x = float(x0)
        self.alpha = dt / (rc + dt)

    def update(self, u: float) -> float:
        self.x = (1.0 - self.alpha) * self.x + self.alpha * float(u)
        return self.x


@dataclass(frozen=True)
class FrameReport:
    """What the daemon publishes about one frame next to the model's outputs."""

    frame_id: int
    dropped_before: int
    frame_drop_perc: float
    model_execution_ms: float
    frame_age_ms: float
    deadline_miss: bool

    def to_dict(self) -> dict[str, Any]:
        return {"frame_id": self.frame_id, "dropped_before": self.dropped_before,
                "frame_drop_perc": round(self.frame_drop_perc, 3),
                "model_execution_ms": round(self.model_execution_ms, 3),
                "frame_age_ms": round(self.frame_age_ms, 3),
                "deadline_miss": self.deadline_miss}


def percentiles(samples: Any, maximum: float | None = None) -> dict[str, float | None]:
    """``{"p50", "p99", "max"}`` of ``samples`` (None when empty); ``maximum`` overrides the
    max (the all-time one when ``samples`` holds only the latest)."""
    if not len(samples):
        return {"p50": None, "p99": None, "max": None}
    a = np.asarray(samples, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()) if maximum is None else float(maximum)}


class FrameStats:
    """Frame-id gaps, the filtered drop percentage and the per-frame timings of one run.

    ``period_s`` is the camera's frame period (the filter's step). Call :meth:`gap` with each
    frame received (before it runs) and :meth:`ran` after it ran; :meth:`restart` when the
    frame stream starts over (a new pool: frame ids restart at 0).
    """

    def __init__(self, period_s: float, *, rc: float = 1.0) -> None:
        self.period_s = period_s
        self._filter = FirstOrderFilter(0.0, rc, period_s)
        self._last_id: int | None = None
        self.frames_in = 0
        self.frames_run = 0
        #: frames the camera ticked that never reached the daemon (frame_id gaps)
        self.gap_dropped = 0
        #: frames received but not run (the worker died, the frame was overwritten ...)
        self.not_run = 0
        self.model_ms: deque[float] = deque(maxlen=MAX_SAMPLES)
        self.age_ms: deque[float] = deque(maxlen=MAX_SAMPLES)
        self.max_model_ms = 0.0
        self.max_age_ms = 0.0
        self.frame_drop_perc = 0.0

    def restart(self) -> None:
        self._last_id = None

    def gap(self, frame_id: int) -> int:
        """Count ``frame_id`` in; returns the frames dropped since the previous one."""
        self.frames_in += 1
        dropped = 0
        if self._last_id is not None and frame_id > self._last_id:
            dropped = frame_id - self._last_id - 1
        self._last_id = frame_id
        self.gap_dropped += dropped
        d = self._filter.update(min(dropped, MAX_DROPS_PER_FRAME))
        if self.frames_in <= WARMUP_FRAMES:
            self._filter.x = d = 0.0
        self.frame_drop_perc = 100.0 * d / (1.0 + d)
        return dropped

    def ran(self, model_s: float, age_s: float) -> None:
        self.frames_run += 1
        self.model_ms.append(model_s * 1e3)
        self.age_ms.append(age_s * 1e3)
        self.max_model_ms = max(self.max_model_ms, model_s * 1e3)
        self.max_age_ms = max(self.max_age_ms, age_s * 1e3)

    @property
    def dropped(self) -> int:
        """Every frame that did not run: gaps plus frames received and not run."""
        return self.gap_dropped + self.not_run

    def summary(self) -> dict[str, Any]:
        return {"frames_in": self.frames_in, "frames_run": self.frames_run,
                "dropped": self.dropped, "gap_dropped": self.gap_dropped,
                "not_run": self.not_run, "frame_drop_perc": round(self.frame_drop_perc, 3),
                "model_execution_ms": percentiles(self.model_ms, self.max_model_ms),
                "frame_age_ms": percentiles(self.age_ms, self.max_age_ms)}
