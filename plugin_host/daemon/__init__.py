"""The host daemon: ``plugin-host run --policy FILE``.

``daemon.py`` is the main loop (:class:`Daemon`); ``stream.py`` one camera's model stream
(its own worker, state, contract and statistics; one per camera); ``contract.py`` the
artifact's state-reset conditions and deadline; ``feed.py`` camera frames to model inputs;
``fixed_inputs.py`` the policy's values for the inputs no camera makes; ``stats.py``
per-frame statistics (openpilot's filtered frame-drop percentage); ``events.py`` the
structured log; ``demo_setup.py`` the first-use creation of the demo key and artifact;
``metrics.py`` the status and Prometheus endpoint.
"""

from .contract import Deadline, StateContract
from .daemon import Daemon, DaemonOptions, StartUpStopped
from .events import EventLog, LineSink
from .stats import FirstOrderFilter, FrameStats
from .stream import CameraStream

__all__ = ["Daemon", "DaemonOptions", "StartUpStopped", "CameraStream", "StateContract",
           "Deadline", "EventLog", "LineSink", "FrameStats", "FirstOrderFilter"]
