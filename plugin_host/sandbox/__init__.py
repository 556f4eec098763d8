"""The sandbox worker: model-layer and backend kernels run in a confined process.

``SandboxedExecutor`` (``client.py``) is the host side, with the Executor's call surface;
``worker.py`` is the worker's main loop. The confinement is in ``confine.py`` (descriptors,
network namespace, rlimits, uid, no_new_privs), ``landlock.py`` and ``seccomp.py``; tensors
cross in shared memory (``ipc.py``); ``audit.py`` is the worker's PEP 578 tripwire.
"""

from .client import SandboxedExecutor, entry_index_checks
from .config import DEFAULT_PRELOAD, Protections, SandboxLimits, SandboxRequirements

__all__ = ["SandboxedExecutor", "SandboxRequirements", "SandboxLimits", "Protections",
           "DEFAULT_PRELOAD", "entry_index_checks"]
