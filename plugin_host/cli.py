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

from . import __version__
from .stop_signals import StopSignals

# Nothing heavier at import (the verbs, numpy): the console script imports this module before
# entry() runs, and until then a Ctrl-C meets Python's own handler (a traceback).
EXIT_REFUSED = 1
EXIT_INTERRUPTED = 130


def _parser() -> argparse.ArgumentParser:
    from .commands import COMMANDS

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
    # first: SIGTERM stops like Ctrl-C (unless the parent ignored it); during the verbs' imports
    # a stop is noted and acted on once they are done, as an exception raised inside an import
    # can come out as another (numpy's C extension turns it into an ImportError)
    stops = StopSignals().install()
    try:
        with stops.deferred():
            parser = _parser()
        stops.check()
        return _run_verb(parser, argv)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        stops.restore()


def _run_verb(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    from abi.errors import PluginHostError

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PluginHostError as exc:
        print(f"plugin-host {args.verb}: {exc}", file=sys.stderr)
        return EXIT_REFUSED


def entry() -> None:
    """The console script: :func:`main` with SIGINT at its default action around it, where
    Python's handler would raise KeyboardInterrupt with nothing to catch it (a traceback): a
    Ctrl-C in the moment before main installs its handler, or after it has put back the one
    it found (a second Ctrl-C as the command ends), ends the process."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(main())


if __name__ == "__main__":
    entry()
