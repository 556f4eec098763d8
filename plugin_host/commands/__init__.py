"""The verbs of the ``plugin-host`` command, one module per group; each has ``register(verbs)``."""

from . import accept, artifact, policy, record, run

COMMANDS = (run, artifact, accept, policy, record)
