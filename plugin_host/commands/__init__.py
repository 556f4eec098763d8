"""The verbs of the ``plugin-host`` command, one module per group; each has ``register(verbs)``."""

from . import artifact, policy, record, run

COMMANDS = (run, artifact, policy, record)
