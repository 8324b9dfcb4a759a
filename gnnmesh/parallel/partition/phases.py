"""The finished phases of a multi-rank preprocessing run, kept on disk so that a run that loses
a rank (or the whole job) resumes from the last phase every rank finished instead of from
scratch: routing 100M edges and partitioning them is too long to repeat.

After each phase a rank saves its own result (numpy arrays) in the *work folder* beside the
output, ``OUT.partial/rank-NNNNN/``: every array as ``PHASE.NAME.npy``, then the phase's
record ``PHASE.json``, written last, which marks the phase finished. Both are written
atomically (``gnnmesh.atomic``). The record holds the run's *key*, everything the result
depends on (the input's digest, the method, epsilon, seed, the rank count, this rank, the
format and gnnmesh's version), and each array's size, checksum, dtype and shape.

A run opening the folder checks its own records (key, sizes, checksums) and takes the last
phase up to which every phase of its own is sound; the ranks agree on the least of theirs,
and they skip every phase up to it, loading the results later phases use. Files of another
key (another input, method, seed, rank count, release) are stale: ignored, and replaced as
the run writes its own. A damaged record or array (torn, truncated, bytes changed) is a
warning naming the file, and that phase and the ones after it are computed again. A run that
writes its output removes the folder; a failed one leaves it for the next run to resume.

The folder is locked with the output (``gnnmesh.locks`` holds the output's lock, whose name
the folder's follows). It holds nothing but what this module writes there: a folder of that
name holding anything else is refused, never deleted.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ... import __version__
from ... import comm as comms
from ...atomic import atomic_file, checksum, is_temporary, write_file
from ...errors import ConfigError, GraphError
from ...structured import loads_json

FORMAT = 1  # the layout of the records and arrays below
SUFFIX = ".partial"
_RANK_FOLDER = re.compile(r"^rank-\d{5}$")
_FILE = re.compile(r"^[a-z][a-z-]*(\.[a-z_]+)?\.(npy|json)$")


def work_folder(directory) -> Path:
    """Where the phases of a run writing ``directory`` are kept: ``directory.partial`` beside it."""
    path = Path(os.path.abspath(directory))
    return path.with_name(path.name + SUFFIX)


class Phases:
    """The phases ``names`` (in the order they run) of one run, for this rank of ``comm``.

    Opening it agrees across the ranks on the phase to resume after (``resumed``, None for
    none) and reports it through ``log`` on rank 0; then ``run`` each phase in order, and
    ``finish`` once the output is written."""

    def __init__(self, comm, directory, key: dict, names: tuple, log: Optional[Callable] = None):
        self.comm, self.names = comm, tuple(names)
        self.folder = work_folder(directory)
        self.shown = Path(f"{Path(directory)}{SUFFIX}")  # named as the output was given
        self.mine = self.folder / f"rank-{comm.rank:05d}"
        self.key = {"format": FORMAT, "gnnmesh": __version__, **key, "parts": comm.world_size, "rank": comm.rank}
        comms.agreed(self._check_folder)
        finished = min(int(k) for k in comm.all_gather_object(self._finished()))
        self.resumed = self.names[finished] if finished >= 0 else None
        self._last = finished
        if self.resumed is None and self.mine.exists():  # another key's, or torn: none of it is used
            shutil.rmtree(self.mine, ignore_errors=True)
        if self.resumed is not None and log is not None and comm.rank == 0:
            log(f"resumed:       after phase {finished + 1} of {len(self.names)} ({self.resumed}) of an earlier "
                f"run, kept in {self.shown}")

    def done(self, name: str) -> bool:
        """Whether phase ``name`` finished in an earlier run (and is skipped in this one)."""
        return self.names.index(name) <= self._last

    def run(self, name: str, compute: Callable, encode: Callable = None, decode: Callable = None):
        """Phase ``name``'s result: loaded when the phase finished before, else ``compute()``,
        saved. ``encode`` turns the result into ``{name: array or None}`` (default: the result
        itself, or its attributes); ``decode`` turns those back (default: the dict itself)."""
        if self.done(name):
            arrays = comms.agreed(lambda: self._load(name))
            return arrays if decode is None else decode(arrays)
        result = compute()
        arrays = encode(result) if encode is not None else result if isinstance(result, dict) else vars(result)
        comms.agreed(lambda: self._save(name, arrays))
        return result

    def finish(self) -> None:
        """The output is in place on every rank: the folder goes."""
        self.comm.all_gather_object(None)
        shutil.rmtree(self.mine, ignore_errors=True)
        self.comm.all_gather_object(None)
        if self.comm.rank == 0:
            shutil.rmtree(self.folder, ignore_errors=True)

    # -- the files ---------------------------------------------------------------------------

    def _check_folder(self) -> None:
        """A ConfigError when the work folder holds anything this module did not write there."""
        if not os.path.lexists(self.folder):
            return
        if not self.folder.is_dir() or self.folder.is_symlink():
            raise ConfigError(f"{self.shown}: exists and is not the folder of a partial run's phases; "
                              f"move it away")
        for entry in os.scandir(self.folder):
            ours = entry.is_dir(follow_symlinks=False) and _RANK_FOLDER.match(entry.name) and all(
                (inner.is_file(follow_symlinks=False) and (_FILE.match(inner.name) or is_temporary(inner.name)))
                for inner in os.scandir(entry.path))
            if not ours:
                raise ConfigError(f"{self.shown}: holds {entry.name}, which gnnmesh did not write there (the folder "
                                  f"keeps a partial run's phases); move it away")

    def _record(self, name: str) -> Path:
        return self.mine / f"{name}.json"

    def _finished(self) -> int:
        """The index of the last phase up to which this rank's phases are all sound (-1: none)."""
        last = -1
        for index, name in enumerate(self.names):
            if not self._sound(name):
                break
            last = index
        return last

    def _sound(self, name: str) -> bool:
        """Whether phase ``name``'s record is this run's and its arrays are the ones it lists; a
        damaged file is a warning naming it."""
        path = self._record(name)
        if not path.is_file():
            return False
        try:
            record = loads_json(path.read_text())
        except (ValueError, OSError, UnicodeDecodeError) as err:
            return _damaged(path, f"unreadable ({' '.join(str(err).split())})")
        if not isinstance(record, dict) or not isinstance(record.get("arrays"), dict):
            return _damaged(path, "not a phase record")
        if record.get("key") != self.key:
            return False  # another run's: stale, not damaged
        for array, facts in record["arrays"].items():
            if facts is None:
                continue
            file = self.mine / f"{name}.{array}.npy"
            if not (isinstance(facts, dict) and isinstance(facts.get("dtype"), str) and isinstance(
                    facts.get("shape"), list) and all(isinstance(d, int) for d in facts["shape"])):
                return _damaged(path, f"not a phase record (array {array!r})")
            if not file.is_file():
                return _damaged(file, "missing")
            if file.stat().st_size != facts.get("bytes"):
                return _damaged(file, f"{file.stat().st_size} bytes where {facts.get('bytes')} were written")
            if checksum(file) != facts.get("checksum"):
                return _damaged(file, "its checksum differs from the one written")
        return True

    def _save(self, name: str, arrays: dict) -> None:
        """This rank's result of phase ``name``: the arrays, then the record that marks it done."""
        self._record(name).unlink(missing_ok=True)
        facts = {}
        for array, value in arrays.items():
            if value is None:
                facts[array] = None
                continue
            file = self.mine / f"{name}.{array}.npy"
            value = np.asarray(value)
            try:
                with atomic_file(file) as out:
                    np.save(out, value, allow_pickle=False)
            except OSError as err:
                raise ConfigError(f"{err.filename or file}: cannot keep the phase '{name}' "
                                  f"({err.strerror or err})") from None
            facts[array] = {"bytes": file.stat().st_size, "checksum": checksum(file), "dtype": value.dtype.str,
                            "shape": list(value.shape)}
        try:
            write_file(self._record(name), _json({"key": self.key, "phase": name, "arrays": facts}))
        except OSError as err:
            raise ConfigError(f"{err.filename or self._record(name)}: cannot keep the phase '{name}' "
                              f"({err.strerror or err})") from None

    def _load(self, name: str) -> dict:
        """The arrays of phase ``name``, each checked against its record (found sound on
        opening; a file changed since is a GraphError naming it)."""
        file = self._record(name)
        try:
            record = loads_json(file.read_text())
        except (ValueError, OSError) as err:
            raise GraphError(f"{file}: cannot read the phase kept there ({' '.join(str(err).split())})") from None
        arrays = {}
        for array, facts in record["arrays"].items():
            if facts is None:
                arrays[array] = None
                continue
            file = self.mine / f"{name}.{array}.npy"
            try:
                value = np.load(file, allow_pickle=False)
            except (ValueError, OSError, EOFError) as err:
                raise GraphError(f"{file}: cannot read the phase kept there ({' '.join(str(err).split())})") from None
            if value.dtype.str != facts["dtype"] or list(value.shape) != facts["shape"]:
                raise GraphError(f"{file}: holds {value.dtype} {list(value.shape)} where {facts['dtype']} "
                                 f"{facts['shape']} was written")
            arrays[array] = value
        return arrays


def _damaged(path: Path, why: str) -> bool:
    warnings.warn(f"{path}: {why}; its phase is computed again", stacklevel=3)
    return False


def _json(value) -> str:
    import json
    return json.dumps(value, indent=1, sort_keys=True) + "\n"
