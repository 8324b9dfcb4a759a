"""Start N local ranks through torch's elastic launcher (what ``torchrun`` uses), and the
signal and child-process policy of every gnnmesh process.

``gnnmesh train --nproc 4 ...`` re-runs the same command line in 4 worker processes with
the usual torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, ...), rendezvousing on
a free localhost port. Under ``torchrun`` or Slurm (``srun torchrun ...``) that environment
is already there and no launcher runs: the same code path trains as one rank.

The policy:

* SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` where the program is, so cleanup runs
  (temporary files are removed) and the process exits 128 + the signal number after one
  line, ``gnnmesh: interrupted``, whatever the cleanup raised. Later signals during that
  cleanup are ignored.
* The launcher stops its ranks with SIGTERM, whichever stop signal it got, and waits for
  them; the ranks exit quietly and the launcher alone prints the line. SIGTERM because a
  rank may still be starting its interpreter, where SIGINT would print a traceback and
  SIGTERM ends it without a word.
* A rank dies with its launcher, however the launcher dies (kill -9 included): the kernel
  sends it SIGKILL when its parent goes (Linux ``PR_SET_PDEATHSIG``; elsewhere a watcher
  thread polls the parent). Ranks run in their own session, so nothing else would.
* Bad input (exit status 2) is one line that the launcher prints once the ranks have ended,
  the line of the lowest rank that left one (``leave_bad_input``): the first rank to stop
  has the agent stop the others, so rank 0 may never reach its own.
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

LAUNCHER_ENV = "GNNMESH_LAUNCHER_PID"
BAD_INPUT_ENV = "GNNMESH_BAD_INPUT_DIR"  # set by launch: where its ranks leave the line they stop on
RESTART_ENV = "GNNMESH_RESTART_COUNT"   # set by launch for the ranks of a restarted job
CAUSE_ENV = "GNNMESH_RESTART_CAUSE"     # and which ranks failed before it
ELASTIC_SIGNALS_ENV = "TORCHELASTIC_SIGNALS_TO_HANDLE"  # torch's launcher sets it for its agent
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PIPE_CLOSED = 128 + signal.SIGPIPE  # stdout was closed (e.g. piped into 'head'): end quietly
_PR_SET_PDEATHSIG = 1


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_received: list = []


def _raise_interrupted(signum, frame):
    ignore_stop_signals()  # the cleanup the exception starts is not interrupted in turn
    stopping(signum)
    raise Interrupted(signum)


def stopping(signum: int) -> None:
    """Note that stop signal ``signum`` arrived. From now on an exception a finalizer raises
    (an object's ``__del__``, a weakref callback, at exit) is part of stopping, not a report
    to print after the one line; and should the signal itself have landed in a finalizer,
    which swallows what it raises, the process ends here instead of going on deaf to
    signals."""
    _received.append(signum)
    sys.unraisablehook = _stopping_unraisable


def _stopping_unraisable(unraisable) -> None:
    if isinstance(unraisable.exc_value, Interrupted):   # raised by the handler: in the main thread
        say_interrupted()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(unraisable.exc_value.exit_status)


def say_interrupted() -> None:
    """The one line of a stopped job, printed by the process that speaks for it: the
    launcher, or rank 0 of a job started by ``torchrun``, or the single process."""
    world = world_from_env()
    if (world is None or world[0] == 0) and not launched_rank():
        print("gnnmesh: interrupted", file=sys.stderr)


def stop_signal():
    """The stop signal this process received, if any: whatever fails after it (an import
    cut short, say) is part of stopping, not an error to report."""
    return _received[0] if _received else None


def ignore_stop_signals() -> None:
    """Also once the work is done: Python restores the default action (death by the signal)
    while it shuts down, which would turn a finished run's status into a signal's."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def stop_on_signals() -> dict:
    """Make SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` (main thread only); return the
    handlers replaced, for ``restore_signals``."""
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupted) for sig in STOP_SIGNALS}


def restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    if sys.unraisablehook is _stopping_unraisable:
        sys.unraisablehook = sys.__unraisablehook__


def world_from_env():
    """(rank, world_size) when this process is a rank started by torchrun, Slurm's torchrun
    or ``gnnmesh train --nproc``, else None."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def check_job_env() -> None:
    """A ConfigError where this process is one of several tasks Slurm started (``srun``) but
    the torchrun variables that say how they meet are missing: each task would otherwise
    train the whole graph alone, every one of them claiming the result."""
    from .errors import ConfigError
    tasks = os.environ.get("SLURM_NTASKS", "").strip()
    if world_from_env() is None and "SLURM_PROCID" in os.environ and tasks.isdigit() and int(tasks) > 1:
        raise ConfigError(f"this is task {os.environ['SLURM_PROCID']} of {tasks} that Slurm started, without the "
                          "torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); start the ranks with "
                          "'srun torchrun ...' (one task per node) or set them")


def end_program(status) -> None:
    """End a finished ``python -m gnnmesh`` with exit status ``status``, skipping the
    interpreter's teardown: freeing every module's objects (torch's, dynamo's, sympy's) takes
    more than a second of CPU, paid by every rank of every job. What the teardown would do
    that matters is done first: the atexit handlers (the process group's shutdown, temporary
    files' removal, logging's flush) and the flush of stdout, stderr and C's stdio. Ends the
    usual way where that could lose something: a status that is not a number (sys.exit prints
    it), another thread still working (the interpreter would wait for it), or output that
    cannot be flushed (the interpreter reports it, and its status changes)."""
    status = 0 if status is None else status
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    if not isinstance(status, int) or any(t.is_alive() for t in others):
        sys.exit(status)
    import atexit
    atexit._run_exitfuncs()  # runs each handler once: a later sys.exit finds none left
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        sys.exit(status)
    _flush_c_stdio()
    os._exit(status & 0xFF)


def _flush_c_stdio() -> None:
    """What C code printed and left in stdio's buffers, which exit() would flush and _exit not."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (Windows)
        pass


def launched_rank() -> bool:
    """Whether this process is a rank started by ``launch`` (which reports for it)."""
    return LAUNCHER_ENV in os.environ and "RANK" in os.environ


def die_with_launcher() -> None:
    """In a rank started by ``launch``: make sure this process ends when the launcher does."""
    if not launched_rank():
        return
    launcher = int(os.environ[LAUNCHER_ENV])
    if not _parent_death_signal(signal.SIGKILL):
        threading.Thread(target=_watch_parent, args=(launcher,), daemon=True).start()
    if os.getppid() != launcher:  # the launcher died before the signal was armed
        os._exit(128 + signal.SIGKILL)


def _parent_death_signal(sig: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(launcher: int) -> None:
    while os.getppid() == launcher:
        time.sleep(0.5)
    os._exit(128 + signal.SIGKILL)


def ranks_share_cores(local_world_size: int) -> int:
    """Compute threads per rank so that the ranks on one machine do not oversubscribe it."""
    return max(1, (os.cpu_count() or 1) // max(1, local_world_size))


def launch(argv: list, nproc: int, max_restarts: int = 0, min_nproc: int = 1) -> int:
    """Run ``python -m gnnmesh <argv>`` as ``nproc`` ranks; return the exit status.

    When a rank fails the launcher stops the others. With ``max_restarts`` left, it starts the
    job again on the ranks that remain (``nproc`` less those that failed, at least
    ``min_nproc``) under the same job id, telling them the restart's count and cause
    (``restart_count``, ``restart_cause``): they resume from the job's checkpoint. Otherwise
    it reports which rank failed. Ranks that stop on bad input (exit status 2) have already
    printed the one-line error, and are not restarted. A stop signal is passed on to the ranks
    and raised here as ``Interrupted``."""
    _silence_elastic_logs()
    os.environ.setdefault("OMP_NUM_THREADS", str(ranks_share_cores(nproc)))
    os.environ[LAUNCHER_ENV] = str(os.getpid())
    handled = os.environ.get(ELASTIC_SIGNALS_ENV)
    # the job's scratch, removed when it ends: the ranks' bad-input lines, and torch's
    # per-rank error files (which would otherwise stay behind in the temporary folder)
    scratch = tempfile.mkdtemp(prefix="gnnmesh-launch-")
    bad_input = os.path.join(scratch, "bad-input")
    os.mkdir(bad_input)
    os.environ[BAD_INPUT_ENV] = bad_input
    try:
        return _run_job(argv, nproc, max_restarts, min_nproc, os.path.join(scratch, "ranks"))
    finally:  # what the ranks of a restart were told is not this process's own
        os.environ.pop(RESTART_ENV, None)
        os.environ.pop(CAUSE_ENV, None)
        os.environ.pop(BAD_INPUT_ENV, None)
        shutil.rmtree(scratch, ignore_errors=True)
        if handled is None:  # torch's launcher set it for its agent
            os.environ.pop(ELASTIC_SIGNALS_ENV, None)
        else:
            os.environ[ELASTIC_SIGNALS_ENV] = handled


def _run_job(argv: list, nproc: int, max_restarts: int, min_nproc: int, logs: str) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    job, ranks = uuid.uuid4().hex, nproc
    for restart in range(max_restarts + 1):
        try:
            _run_ranks(argv if restart == 0 else [*argv, "--nproc", str(ranks)], ranks, job, logs)
            return 0
        except ChildFailedError as err:
            # a peer that lost the rank stopping on bad input may be the failure seen first
            if _say_bad_input() or any(f.exitcode == 2 for f in err.failures.values()):
                return 2
            if _stdout_closed():  # rank 0 stopped on it; a peer may have failed first, on rank 0's exit
                return PIPE_CLOSED
            lost = _lost_ranks(err.failures)
            if restart == max_restarts:
                # a rank killed is the cause; a peer may have seen the loss and exited before
                # the agent saw the killed one stop, with an earlier failure time
                rank, first = (lost[0], err.failures[lost[0]]) if lost else err.get_first_failure()
                detail = _failure_text(first)
                print(f"gnnmesh: error: rank {rank} failed (exit code {first.exitcode})"
                      f"{': ' + detail if detail else ''}", file=sys.stderr)
                return 1
            ranks = max(ranks - len(lost), min_nproc)
            os.environ[RESTART_ENV] = str(restart + 1)
            os.environ[CAUSE_ENV] = _restart_cause(lost, err)
    return 1  # not reached: the last try returns


def leave_bad_input(line: str) -> bool:
    """In a rank started by ``launch``: leave ``line``, the one-line error this rank stops on,
    for the launcher to print once the job has ended (True); False elsewhere, where the rank
    prints it or not as it speaks for the job. Rank 0 printing it itself could lose it: a
    peer that stops first has the agent stop the others, rank 0 perhaps before its line."""
    folder = os.environ.get(BAD_INPUT_ENV)
    if not launched_rank() or not folder or not os.path.isdir(folder):
        return False
    path = os.path.join(folder, f"{world_from_env()[0]}.txt")
    with open(path + ".part", "w") as out:
        out.write(line + "\n")
    os.replace(path + ".part", path)  # the launcher reads a whole line or none
    return True


def _say_bad_input() -> bool:
    """Print the line of the lowest rank that stopped on bad input (rank 0's when it got
    there: the ranks read the same input), one line for the job whichever stopped first;
    False where no rank left one."""
    folder = os.environ.get(BAD_INPUT_ENV, "")
    left = sorted((int(name[:-len(".txt")]), name) for name in os.listdir(folder) if name.endswith(".txt")) \
        if os.path.isdir(folder) else []
    if left:
        with open(os.path.join(folder, left[0][1])) as line:
            sys.stderr.write(line.read())
    return bool(left)


def _lost_ranks(failures: dict) -> list:
    """The ranks whose process died of a signal (killed, out of memory): the ranks lost. The
    others exited on their own, on the loss (a collective that lost its peer, the agent's
    SIGTERM), or on an error of their own, and start again with the job."""
    return sorted(rank for rank, failure in failures.items() if failure.exitcode < 0)


def _restart_cause(lost: list, err) -> str:
    """What the ranks of a restart are told went wrong: the ranks lost, or the first failure."""
    if lost:
        return ", ".join(f"rank {rank} died of {err.failures[rank].signal_name()}" for rank in lost)
    rank, first = err.get_first_failure()
    return f"rank {rank} failed (exit code {first.exitcode})"


def _run_ranks(argv: list, nproc: int, job: str, logs: str) -> None:
    """One run of the job's ranks under torch's elastic agent (ChildFailedError when one fails),
    its per-rank files under ``logs``."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, SignalException
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    # torch's agent would pass SIGINT, SIGTERM and SIGHUP on to the ranks as they came; left
    # to stop_on_signals' handler they raise Interrupted in the agent, whose cleanup stops
    # the ranks with SIGTERM
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=job,
                          logs_specs=DefaultLogsSpecs(logs), rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.1, signals_to_handle="SIGQUIT")
    try:
        elastic_launch(config, sys.executable)("-m", "gnnmesh", *argv)
    except SignalException as err:  # torch's handler (SIGQUIT), while the ranks run: they have stopped
        ignore_stop_signals()
        stopping(err.sigval)
        raise Interrupted(err.sigval) from None


def restart_count() -> int:
    """How many times this job has been restarted after a rank failed: 0 in its first run.
    Set by ``launch`` (``--nproc --max-restarts``) or by torch's elastic agent (``torchrun
    --max-restarts``), whose count holds where ``launch`` did not start the ranks."""
    if world_from_env() is None:
        return 0
    for name in (RESTART_ENV, "TORCHELASTIC_RESTART_COUNT"):
        text = os.environ.get(name, "").strip()
        if text.isdigit():
            return int(text)
    return 0


def restarts_left() -> bool:
    """Whether torch's elastic agent restarts this job should a rank fail now (``torchrun
    --max-restarts``): a peer's loss is then the restart's to report, not this rank's."""
    text = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "").strip()
    return world_from_env() is not None and text.isdigit() and int(text) > restart_count()


def restart_cause() -> "str | None":
    """Which ranks failed before this restart, as ``launch`` saw them (torchrun does not say)."""
    if not restart_count():
        return None
    return os.environ.get(CAUSE_ENV) or None


def job_id() -> "str | None":
    """The id every run of one elastic job shares, restarts included (torch's run id:
    ``torchrun --rdzv-id``, or the one ``launch`` draws); None outside a job."""
    return (os.environ.get("TORCHELASTIC_RUN_ID") or None) if world_from_env() is not None else None


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on it)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no poll, or no real stdout
        return False


def _silence_elastic_logs() -> None:
    # torch gives each elastic module a logger with its own level, so the parent's is not enough
    import torch.distributed.elastic.agent.server.api  # noqa: F401  (creates the loggers)
    import torch.distributed.launcher.api  # noqa: F401
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _failure_text(failure) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    text = str(message or "").strip()
    if not text or text.startswith("To enable traceback"):
        return f"signal {failure.signal_name()}" if failure.exitcode < 0 else ""
    return text.splitlines()[-1] if "\n" in text else text
