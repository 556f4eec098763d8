"""The ``plugin-host`` command.

Every verb has ``--help`` with an example, exits 0 on success, and on a refusal exits non-zero
with one line on stderr (the error's message); a traceback means a bug.

Exit codes: 0 success, 1 refused (a :class:`~abi.errors.PluginHostError`), 2 bad usage,
130 interrupted. How SIGTERM and Ctrl-C act: :mod:`plugin_host.stop_signals`.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Sequence

from abi.errors import PluginHostError

from . import __version__
from .commands import COMMANDS
from .commands.common import EXIT_INTERRUPTED, EXIT_REFUSED
from .stop_signals import StopSignals


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plugin-host", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run signed, ABI-checked neural-network models through plugins.",
        epilog="Run 'plugin-host VERB --help' for a verb's options and an example.")
    parser.add_argument("--version", action="version", version=f"plugin-host {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    for module in COMMANDS:
        module.register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    stops = StopSignals().install()  # SIGTERM stops like Ctrl-C, unless the parent ignored it
    try:
        return args.func(args)
    except PluginHostError as exc:
        print(f"plugin-host {args.verb}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        stops.restore()


def entry() -> None:
    """The console script: :func:`main` with Python's SIGINT handler at the default action
    around it, so that a second Ctrl-C landing after the command's handler is put back, in the
    moment before the interpreter exits, ends the process instead of printing a traceback."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
