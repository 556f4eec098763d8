"""The host daemon: ``plugin-host run --policy FILE``.

``daemon.py`` is the main loop (:class:`Daemon`); ``contract.py`` the artifact's state-reset
conditions and deadline; ``feed.py`` camera frames to model inputs; ``stats.py`` per-frame
statistics (openpilot's filtered frame-drop percentage); ``events.py`` the structured log;
``demo_setup.py`` the first-use creation of the demo key and artifact. (The status and
Prometheus endpoint, ``metrics.py``, is still to come.)
"""

from .contract import Deadline, StateContract
from .daemon import Daemon, DaemonOptions
from .events import EventLog, LineSink
from .stats import FirstOrderFilter, FrameStats

__all__ = ["Daemon", "DaemonOptions", "StateContract", "Deadline", "EventLog", "LineSink",
           "FrameStats", "FirstOrderFilter"]
