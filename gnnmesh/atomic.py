"""Every file and directory gnnmesh writes goes through here: it is built under a temporary
name beside the target, flushed to disk, then renamed into place, so a reader (or a run
resumed after a crash) sees either the old complete content or the new one, never a mix.

Temporaries are named ``.<target>.tmp-<host>-<pid>-<random>``. An interrupted write removes
its own (signals arrive as exceptions, see ``gnnmesh.launch``); one killed outright leaves
it, and the next write into that directory sweeps temporaries whose process is gone.
Files and directories get the permissions the umask allows, like any other file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable

from . import locks
from .errors import ConfigError

_HOST = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"
_TEMPORARY = re.compile(r"^\..*\.tmp-(?P<host>[A-Za-z0-9]+)-(?P<pid>\d+)-[^.]*$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _prefix(name: str) -> str:
    return f".{name}.tmp-{_HOST}-{os.getpid()}-"


def temporary_prefix(name: str) -> str:
    """The prefix of this process's temporaries for ``name``: a file made with it (by
    ``tempfile.mkstemp(prefix=...)``) is swept by ``sweep_stale`` once this process is gone.
    The host store names its files so."""
    return _prefix(name)


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one of our temporaries (of any process)."""
    return _TEMPORARY.match(name) is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_stale(directory) -> int:
    """Remove the temporaries in ``directory`` left by processes of this host that no longer
    run (another host's cannot be checked, so they stay). Returns how many were removed."""
    removed = 0
    try:
        names = os.listdir(directory)
    except OSError:
        return 0
    for name in names:
        match = _TEMPORARY.match(name)
        if not match or match["host"] != _HOST or _alive(int(match["pid"])):
            continue
        path = Path(directory) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


def check_writable(path, what: str) -> None:
    """Fail before training, not after hours of it, when ``path`` cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; the {what} must be a file path")
    for parent in path.parents:  # mkdir on a path through a file says only "File exists"
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(f"{path}: cannot write the {what} ({parent} is not a directory)")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"{path}: cannot write the {what} ({err.strerror or err})") from None
    if not os.access(path.parent, os.W_OK):
        raise ConfigError(f"{path}: cannot write the {what} (directory not writable)")


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems cannot sync a directory; the rename is still atomic
        pass
    finally:
        os.close(fd)


def temporary_directory(target) -> Path:
    """A fresh temporary directory beside ``target`` (stale ones there swept first), with
    the umask's permissions. The caller renames it into place or removes it."""
    target = Path(os.path.abspath(target))  # "." has no name to put a temporary beside
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=_prefix(target.name), dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    return tmp


def _about(err: OSError, path) -> OSError:
    """``err`` (its errno and reason) about ``path``: the file or directory the caller asked
    for, not the temporary it is written under (a write to an open file names none at all)."""
    return OSError(err.errno, err.strerror or str(err), str(path))


@contextmanager
def atomic_file(path, mode: str = "wb"):
    """Yield a file open on a temporary beside ``path``; on normal exit it is flushed,
    fsynced and renamed over ``path``. On any exception (a signal included) the temporary
    is removed and ``path`` is untouched. An OSError of the write (a full disk, a read-only
    directory) names ``path``."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=_prefix(path.name), dir=path.parent)
    except OSError as err:
        raise _about(err, path) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        if err.filename in (None, tmp):  # not another file the caller's code was reading
            raise _about(err, path) from None
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def checksum(path) -> str:
    """blake2b-128 of a file's bytes, read in pieces (nothing large stays in memory): what the
    sets written here (parts, shard sets) record of every file, to know a file read back is
    the one written."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for piece in iter(lambda: fh.read(1 << 22), b""):
            h.update(piece)
    return h.hexdigest()


def write_file(path, data) -> None:
    """Replace ``path`` atomically with ``data`` (bytes or str)."""
    with atomic_file(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


@dataclass(frozen=True)
class OutputKind:
    """A kind of directory gnnmesh writes whole, and may later replace whole.

    ``what`` names it in refusals and in its lock ("prediction directory"); ``marker`` is the
    file its writer writes last (its manifest). ``files(directory)`` reads the marker (checked
    as its reader checks it) and returns the paths, relative to ``directory`` with ``/``
    between folders, of every file that output's writer wrote; it raises a ValueError
    (ConfigError and GraphError are ValueErrors) or an OSError saying why the marker is not
    one of this kind."""

    what: str
    marker: str
    files: Callable[[Path], Iterable[str]]


def check_replaceable(directory, kind: OutputKind, name=None) -> None:
    """ConfigError, one line naming ``directory``, unless a new output of ``kind`` may replace
    it: it is absent, an empty directory, or an earlier output of ``kind`` that holds nothing
    its writer did not write. Replacing deletes the whole directory, so a directory that only
    looks like one (a ``manifest.json`` of another program) or that also holds the user's own
    files or folders is never replaced. A command checks this before its work;
    ``staged_directory`` checks it again just before it replaces. The error names
    ``directory`` as ``name`` (default: as given)."""
    if _holds_the_current_directory(directory):
        raise ConfigError(f"{directory if name is None else name}: is the current directory or holds it, and a "
                          f"{kind.what} replaces its directory whole; choose another path")
    problem = _not_replaceable(Path(os.path.abspath(directory)), kind)
    if problem:
        raise ConfigError(f"{directory if name is None else name}: exists and is not a {kind.what} "
                          f"({problem}); refusing to overwrite it")


def _holds_the_current_directory(directory) -> bool:
    """Whether ``directory`` exists and is the current directory or one above it: replacing it
    would leave this process, and the shell it was started from, in a removed directory."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # already removed: nothing to protect
        return False
    if not os.path.isdir(directory):
        return False
    target = os.path.realpath(directory)
    return os.path.commonpath([here, target]) == target


def _not_replaceable(directory: Path, kind: OutputKind) -> str:
    """Why ``directory`` may not be replaced by an output of ``kind`` ("" when it may)."""
    if not os.path.lexists(directory):
        return ""
    if not directory.is_dir():
        return "not a directory"
    try:
        found = _entries(directory)
    except OSError as err:
        return f"cannot list it: {err.strerror or err}"
    if not found:
        return ""
    if found.get(PurePosixPath(kind.marker)) != "file":
        return f"it holds {_shown(_foreign(found, set()))} and no {kind.marker}"
    try:
        written = {PurePosixPath(name) for name in kind.files(directory)}
    except (ValueError, OSError, RecursionError) as err:
        reason = " ".join(str(err).split()) or type(err).__name__
        return reason[len(str(directory)) + 1:] if reason.startswith(f"{directory}/") else reason
    foreign = _foreign(found, written)
    if foreign:
        return f"it also holds {_shown(foreign)}, which gnnmesh did not write there"
    return ""


def _shown(names: list) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _entries(directory: Path) -> dict:
    """Every entry below ``directory``, by path relative to it: "dir" (a real folder, walked
    into), "file" (a regular file) or "other" (a symbolic link, a socket, ...)."""
    found, pending = {}, [PurePosixPath()]
    while pending:
        folder = pending.pop()
        with os.scandir(directory / folder) as entries:
            for entry in entries:
                path = folder / entry.name
                if entry.is_dir(follow_symlinks=False):
                    found[path] = "dir"
                    pending.append(path)
                else:
                    found[path] = "file" if entry.is_file(follow_symlinks=False) else "other"
    return found


def _foreign(found: dict, written: set) -> list:
    """The entries of ``found`` that are not the ``written`` files or their folders, each shown
    once (a foreign folder, not everything in it), folders with a trailing ``/``."""
    folders = {parent for path in written for parent in path.parents} - {PurePosixPath()}
    foreign = {path for path, what in found.items() if not (
        (what == "file" and path in written) or (what == "dir" and path in folders))}
    top = [path for path in foreign if not any(parent in foreign for parent in path.parents)]
    return sorted(f"{path}/" if found[path] == "dir" else str(path) for path in top)


@contextmanager
def staged_directory(directory, kind: OutputKind, name=None):
    """Yield a fresh temporary directory; on normal exit it replaces ``directory``.

    Only what ``check_replaceable`` allows is replaced, checked on entry and again just before
    the replacement; anything else is a ConfigError naming ``directory``. ``directory`` is
    locked for the while (``gnnmesh.locks``; a command that writes it holds the lock from its
    start). The temporary is made beside ``directory``'s absolute path, never inside it. On an
    error the temporary is removed and nothing changes. An OSError of the staging (a full
    disk, a read-only directory) names ``directory`` as ``name`` (default: as given), or a
    file written into the temporary at its place there."""
    named = Path(directory if name is None else name)
    directory = Path(os.path.abspath(directory))
    with locks.hold(directory, kind.what):
        check_replaceable(directory, kind, named)
        try:
            tmp = temporary_directory(directory)
        except OSError as err:
            raise _about(err, named) from None
        try:
            yield tmp
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            where = _placed(err.filename, tmp, named)
            if where is None:  # another file the caller's code was reading
                raise
            raise _about(err, where) from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            check_replaceable(directory, kind, named)  # nothing of the user's has appeared there meanwhile
            _move_into_place(tmp, directory)
        except OSError as err:
            raise _about(err, named) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _placed(filename, tmp: Path, named: Path):
    """Where ``filename`` (of an error while staging into ``tmp``) is to land: ``named`` when
    unknown, a file of ``tmp`` at its place in ``named``; None for a file elsewhere."""
    if filename is None:
        return named
    try:
        inside = Path(os.path.abspath(os.fsdecode(filename))).relative_to(os.path.abspath(tmp))
    except (TypeError, ValueError):
        return None
    return named / inside


def _move_into_place(tmp: Path, directory: Path) -> None:
    """Rename ``tmp`` to ``directory``. An existing ``directory`` is first moved into a
    temporary of its own, removed once the new one is in place, and put back if it cannot be:
    a failure leaves the earlier directory as it was and no temporary behind."""
    if not os.path.lexists(directory):
        os.rename(tmp, directory)
        _fsync_directory(directory.parent)
        return
    aside = Path(tempfile.mkdtemp(prefix=_prefix(directory.name), dir=directory.parent))
    try:
        os.rename(directory, aside / "set")
        try:
            os.rename(tmp, directory)
        except BaseException:
            os.rename(aside / "set", directory)
            raise
    except BaseException:
        with suppress(OSError):
            os.rmdir(aside)  # empty unless the earlier directory could not be put back
        raise
    _fsync_directory(directory.parent)
    shutil.rmtree(aside, ignore_errors=True)
