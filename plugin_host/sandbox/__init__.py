"""The sandbox worker: model-layer and backend kernels run in a confined process.

``SandboxedExecutor`` (``client.py``) is the host side, with the Executor's call surface (its
camera-frame methods in ``camera_frames.py``, the worker's start, messages, deaths and restarts
in ``supervisor.py``), and ``process.py`` its handle on one worker process; ``worker.py`` is the
worker's main loop. The confinement is in ``confine.py`` (descriptors, network namespace,
rlimits, uid, no_new_privs), ``landlock.py`` and ``seccomp.py``; tensors cross in shared memory
(``ipc.py``); ``audit.py`` is the worker's PEP 578 tripwire.
``kernels.py`` holds the kernel rule (which model-layer kernels are accepted) and
``policy.py`` turns a policy into the worker's configuration (``sandbox_config_from_policy``)
and its events into audit records (``audit_sinks``).
"""

from ..executor import entry_index_checks  # re-exported: the host-side checks of a call
from .client import SandboxedExecutor
from .config import DEFAULT_PRELOAD, Protections, SandboxLimits, SandboxRequirements
from .policy import SandboxConfig, audit_sinks, sandbox_config_from_policy

__all__ = ["SandboxedExecutor", "SandboxRequirements", "SandboxLimits", "Protections",
           "DEFAULT_PRELOAD", "entry_index_checks", "SandboxConfig", "sandbox_config_from_policy",
           "audit_sinks"]
