"""Command line: ``gnnmesh train | datasets | partition | plan | report`` (``gnnmesh.commands``).

Bad input (a malformed graph file, an unknown dataset, an invalid flag or config value)
prints one line ``gnnmesh: error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
import warnings
from typing import Optional

from . import __version__, progress
from .commands import COMMANDS
from .commands.plugins import import_plugins
from .errors import ConfigError, GraphError
from .launch import (PIPE_CLOSED, die_with_launcher, ignore_stop_signals, launched_rank, leave_bad_input,
                     restarts_left, restore_signals, say_interrupted, stop_on_signals, stop_signal,
                     world_from_env)


# Failures of the storage under a file, not of the input: the rank that meets one names it.
RANK_OWN_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A value that starts with a minus and a digit is a value, as Python 3.13's argparse has it:
        # before it only a lone number was, and '--fanouts -1,10' or '--class-weights -1,2' (lists
        # of every list-valued flag) failed as "expected one argument". No gnnmesh flag looks so.
        self._negative_number_matcher = re.compile(r"^-\.?\d")

    def error(self, message):  # one line, status 2
        self.exit(2, f"gnnmesh: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gnnmesh", description="Full-graph GNN training on one process or many.")
    parser.add_argument("--version", action="version", version=f"gnnmesh {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        _command(name).add_parser(sub)
    return parser


def _command(name: str):
    return importlib.import_module(f"{__package__}.commands.{name.replace('-', '_')}")


def main(argv: Optional[list] = None) -> int:
    """The program (``argv=None``: the command line's), or one command run in-process."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    world = world_from_env()
    if program and (world is None or world[0] == 0):  # the library stays quiet; rank 0 speaks for a job
        progress.enable()
    die_with_launcher()
    previous, formatwarning = stop_on_signals(), warnings.formatwarning
    warnings.formatwarning = _one_line_warning
    try:
        if world_from_env() is not None:  # a rank of a distributed job: record failures for the launcher
            from torch.distributed.elastic.multiprocessing.errors import record
            return record(_main)(argv)
        return _main(argv)
    except BaseException:
        signum = stop_signal()
        if signum is None:
            raise
        return _interrupted(128 + signum)
    finally:
        if program:
            ignore_stop_signals()  # the process is ending: see ignore_stop_signals
        else:
            restore_signals(previous)
            warnings.formatwarning = formatwarning


def _interrupted(status: int) -> int:
    say_interrupted()
    return status


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    text = str(message)
    return f"gnnmesh: warning: {text[len('gnnmesh: '):] if text.startswith('gnnmesh: ') else text}\n"


def _main(argv: list) -> int:
    world = world_from_env()
    speak = world is None or world[0] == 0  # in a job, rank 0 alone reports bad input
    try:
        import_plugins()   # before the parser, whose choices list what they register
        args = build_parser().parse_args(argv)  # imports torch: seconds in which to be interrupted
        return _command(args.command).run(args, argv)
    except (GraphError, ConfigError) as err:
        _say_error(f"gnnmesh: error: {err}", speak)
        return 2
    except BrokenPipeError:  # stdout closed by its reader (e.g. '| head'): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush there
        return PIPE_CLOSED
    except OSError as err:  # e.g. an unwritable --metrics or --checkpoint path, a full disk
        where = f"{err.filename}: " if err.filename else ""
        if speak or err.errno not in RANK_OWN_ERRORS:
            _say_error(f"gnnmesh: error: {where}{err.strerror or err}", speak)
        else:  # a file of this rank's own (its host store): rank 0 cannot see it
            _say_error(f"gnnmesh: error: rank {world[0]}: {where}{err.strerror or err}", True)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM/SIGHUP (see gnnmesh.launch)
        return _interrupted(getattr(err, "exit_status", 130))
    except Exception as err:
        # the launcher names the rank that failed first; torchrun's agent restarts the job
        if (launched_rank() or restarts_left()) and _peer_lost(err):
            return 1
        raise


def _say_error(line: str, speak: bool) -> None:
    """The one-line error this process stops on: left for the launcher in a rank it started
    (it prints one line for the job), else printed where this process speaks."""
    if not leave_bad_input(line) and speak:
        print(line, file=sys.stderr)


def _peer_lost(err: Exception) -> bool:
    """Whether ``err`` is a collective failing because another rank went away."""
    text = str(err).lower()
    return type(err).__name__ in ("DistBackendError", "DistNetworkError", "RuntimeError") and any(
        phrase in text for phrase in ("connection closed by peer", "connection reset by peer",
                                      "broken pipe", "socket closed", "timed out"))


if __name__ == "__main__":
    sys.exit(main())
