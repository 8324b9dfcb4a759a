"""Outputs a run owns are locked for its lifetime, so that a second run given the same metrics
file, checkpoint, store directory or parts directory is refused before it starts instead of
silently losing one run's output.

The lock is an advisory ``flock`` on a sidecar file ``.<name>.lock`` beside the output (the
output itself is replaced by rename, which swaps its inode, so it cannot carry the lock).
The sidecar holds the holder's pid, host and run, for the refusal to name; it is removed
when the run releases it. A run killed outright (kill -9) leaves it behind, but its lock
dies with its process, so the next run simply takes it. Sidecars are not temporaries:
``gnnmesh.atomic.sweep_stale`` leaves them alone.

Within one process a lock is taken again freely (a command and the writer it calls, the
stores of one rank): what is refused is another process. Where the platform has no
``fcntl`` (Windows), outputs are not locked; where a file system cannot lock (some network
or FUSE file systems), the run goes on unlocked with a warning.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
import warnings
from pathlib import Path
from typing import Optional

from .errors import ConfigError
from .structured import loads_json

try:
    import fcntl
except ImportError:  # no advisory locks on this platform: outputs are not locked
    fcntl = None

_HELD: dict = {}  # sidecar path -> [fd or None (held by a peer rank of this run), holds]
_GUARD = threading.Lock()
_READ_WAIT = 1.0  # seconds to wait for a holder that has just locked to write who it is


def sidecar(path) -> Path:
    """The lock file of the output ``path``: ``.<name>.lock`` in its (real) directory; ``.`` and
    ``..`` are the directories they name (``--out .`` is locked beside the current directory)."""
    path = Path(os.path.abspath(path))
    return Path(os.path.realpath(path.parent)) / f".{path.name}.lock"


def _run_id() -> Optional[str]:
    """What the ranks of one multi-rank run share (None for a single process)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return os.environ.get("TORCHELASTIC_RUN_ID") or \
        f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"


class Lock:
    """One hold of an output's lock; ``release`` (or leaving the ``with``) gives it up, and
    the last hold of this process removes the sidecar."""

    def __init__(self, path: Path, key: Optional[str]):
        self.path, self._key = path, key

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _GUARD:
            entry = _HELD.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _HELD[key]
            if entry[0] is not None:  # unlinked while still locked: a run waiting on it retries
                try:
                    os.unlink(key)
                except OSError:
                    pass
                os.close(entry[0])

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def hold(path, what: str, peers: bool = False) -> Lock:
    """Lock the output ``path`` (a file or a directory, ``what`` says which kind, e.g.
    "metrics file") for this process until ``release``. Another process holding it is a
    ConfigError naming ``path`` and that process (pid and host). ``peers``: the ranks of one
    multi-rank run may share ``path`` (one of them holds it for all)."""
    path = Path(path)
    if fcntl is None:
        return Lock(path, None)
    lockfile = sidecar(path)
    key = str(lockfile)
    with _GUARD:
        if key in _HELD:
            _HELD[key][1] += 1
            return Lock(path, key)
        fd = _take(path, lockfile, what, peers)
        if fd is not False:
            _HELD[key] = [fd, 1]
            return Lock(path, key)
    return Lock(path, None)


def _take(path: Path, lockfile: Path, what: str, peers: bool):
    """The locked descriptor of ``lockfile``, None when a peer rank holds it, False when it
    cannot be locked here (a warning says so); a ConfigError when another run holds it, or
    when the output cannot be a path at all (a file where a folder should be)."""
    while True:
        try:
            lockfile.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lockfile, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            if err.errno in (errno.ENOTDIR, errno.ENOENT, errno.EEXIST):  # a file where a folder should be
                raise ConfigError(f"{path}: cannot write the {what} ({err.strerror or err})") from None
            return _unlocked(path, what, err)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                return _unlocked(path, what, err)
            holder = _holder(fd)
            os.close(fd)
            if peers and holder.get("run") is not None and holder.get("run") == _run_id():
                return None
            raise ConfigError(f"{path}: the {what} is in use by another run ({_describe(holder)}); "
                              f"wait for it to end or choose another path") from None
        try:  # the file locked may have been released and unlinked since it was opened
            current = os.stat(lockfile)
        except FileNotFoundError:
            current = None
        mine = os.fstat(fd)
        if current is None or (current.st_dev, current.st_ino) != (mine.st_dev, mine.st_ino):
            os.close(fd)
            continue
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "run": _run_id(),
                             "what": what, "path": str(path)}) + "\n"
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode(), 0)
        except OSError:  # the lock holds all the same; only the refusal's detail is lost
            pass
        return fd


def _holder(fd: int) -> dict:
    """Who holds the lock on ``fd``, as it wrote (it may have only just locked it, and not yet
    replaced the record a run killed outright left behind: that one is not taken for it)."""
    deadline = time.monotonic() + _READ_WAIT
    while True:
        try:
            record = loads_json(os.pread(fd, 4096, 0).decode())
            if isinstance(record, dict) and "pid" in record and _alive(record):
                return record
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.02)


def _alive(record: dict) -> bool:
    """Whether the process a record names may still run (on another host: assumed so)."""
    if record.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(record["pid"]), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError, TypeError, OverflowError):  # not ours to signal, or not a pid
        return True
    return True


def _describe(holder: dict) -> str:
    if "pid" not in holder:
        return "a process that has not said who it is"
    return f"pid {holder['pid']} on host {holder.get('host', '?')}"


def _unlocked(path: Path, what: str, err: OSError):
    warnings.warn(f"{path}: cannot lock the {what} ({err.strerror or err}); going on without the lock")
    return False
