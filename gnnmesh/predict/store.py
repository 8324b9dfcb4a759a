"""A prediction directory: every rank's rows as a part, and a manifest.

Each rank writes its own rows with their global node ids (no rank holds more than its
share); rank 0 writes ``manifest.json``, which lists the parts (under ``"shards"``, the key the
format has always used), their shapes and dtypes,
the checkpoint the model came from and the graph's content key. The directory is staged and
moved into place whole (``gnnmesh.atomic.staged_directory``): a failure on any rank leaves
nothing, and only an absent or empty directory or an earlier prediction holding nothing but
its own files (``OUTPUT``) is replaced.

Parts are NumPy ``.npy`` files (``ids-RRRRR.npy`` and ``values-RRRRR.npy``) or, with
``format="parquet"`` (pyarrow), one ``part-RRRRR.parquet`` per rank with an ``id`` column and
a ``value`` column (a list per row for a matrix). ``read`` checks everything it reads back.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..atomic import OutputKind, staged_directory
from ..errors import ConfigError
from ..structured import TooDeep, loads_json

MANIFEST = "manifest.json"
KIND = "gnnmesh prediction"
VERSION = 1
FORMATS = ("npy", "parquet")
PARTS = "shards"  # the manifest's key for its list of parts: the format's name, kept for directories written


@dataclass
class Prediction:
    """Rows read back from a prediction directory, in global id order."""

    ids: np.ndarray      # int64 [rows]
    values: np.ndarray   # [rows, width] (labels: [rows])
    manifest: dict

    def __len__(self) -> int:
        return len(self.ids)


def write(directory, ids: np.ndarray, values: np.ndarray, info: dict, fmt: str = "npy", comm=None) -> Optional[dict]:
    """Write this rank's rows (global ``ids``, ``values``) into ``directory``; ``comm``: the
    job's communicator (None: one process). ``info``: what the manifest records besides the
    parts. Every rank calls it; rank 0 returns the manifest."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose from {', '.join(FORMATS)}")
    if fmt == "parquet":
        _pyarrow()
    rank = comm.rank if comm is not None else 0
    together = _together(comm)
    with contextlib.ExitStack() as stack:
        staged = together(lambda: stack.enter_context(staged_directory(directory, OUTPUT))
                          if rank == 0 else None)
        if comm is not None:
            staged = comm.broadcast_object(staged)
        part = together(lambda: _guarded(directory, lambda: _write_part(Path(staged), rank, ids, values, fmt)))
        parts = comm.all_gather_object(part) if comm is not None else [part]

        def finish():
            if rank != 0:
                return None
            manifest = {"kind": KIND, "version": VERSION, "format": fmt, **info,
                        "rows": sum(p["rows"] for p in parts), "width": None if values.ndim == 1 else
                        int(values.shape[1]), "dtype": str(values.dtype), PARTS: parts}
            text = json.dumps(manifest, indent=1) + "\n"
            _guarded(directory, lambda: (Path(staged) / MANIFEST).write_text(text, encoding="utf-8"))
            _guarded(directory, stack.close)  # moved into place
            return manifest

        return together(finish)


def _together(comm):
    """``fn()`` on every rank, a bad-input error anywhere raised everywhere (one process: as is)."""
    if comm is None:
        return lambda fn: fn()
    from ..comm import agreed
    return agreed


def _guarded(directory, fn):
    try:
        return fn()
    except OSError as err:
        raise ConfigError(f"{directory}: cannot write the prediction ({err.strerror or err})") from None


def _write_part(staged: Path, rank: int, ids: np.ndarray, values: np.ndarray, fmt: str) -> dict:
    entry = {"rank": rank, "rows": int(len(ids))}
    if fmt == "npy":
        entry.update(ids=f"ids-{rank:05d}.npy", values=f"values-{rank:05d}.npy")
        np.save(staged / entry["ids"], np.ascontiguousarray(ids, dtype=np.int64))
        np.save(staged / entry["values"], np.ascontiguousarray(values))
        return entry
    pa, pq = _pyarrow()
    entry["file"] = f"part-{rank:05d}.parquet"
    column = pa.array(values) if values.ndim == 1 else \
        pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), values.shape[1])
    pq.write_table(pa.table({"id": pa.array(ids.astype(np.int64)), "value": column}), staged / entry["file"])
    return entry


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("--format parquet needs pyarrow: pip install 'gnnmesh[parquet]'") from None
    return pa, pq


# -- reading back -----------------------------------------------------------------------------------

def read(directory) -> Prediction:
    """The rows of the prediction in ``directory`` in global id order, every file checked:
    a damaged or foreign directory is a ConfigError naming the file."""
    directory = Path(directory)
    manifest = _manifest(directory)
    ids, values = [], []
    for part in manifest[PARTS]:
        part_ids, part_values = _read_part(directory, manifest, part)
        ids.append(part_ids)
        values.append(part_values)
    ids = np.concatenate(ids) if ids else np.empty(0, dtype=np.int64)
    values = np.concatenate(values) if values else np.empty((0,), dtype=manifest["dtype"])
    order = np.argsort(ids, kind="stable")
    ids, values = ids[order], values[order]
    nodes = manifest["graph"]["nodes"]
    if len(ids) and (ids[0] < 0 or ids[-1] >= nodes):
        raise ConfigError(f"{directory}: node ids outside 0 to {nodes - 1} (the graph's)")
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        raise ConfigError(f"{directory}: node {int(ids[1:][ids[1:] == ids[:-1]][0])} is written by two parts")
    return Prediction(ids, values, manifest)


def written_files(directory) -> list:
    """The files the prediction in ``directory`` consists of: its manifest and the parts it
    lists (ConfigError when the manifest is not a prediction's)."""
    manifest = _manifest(Path(directory))
    names = ("ids", "values") if manifest["format"] == "npy" else ("file",)
    return [MANIFEST] + [part[name] for part in manifest[PARTS] for name in names]


OUTPUT = OutputKind("prediction directory", MANIFEST, written_files)  # what ``write`` may replace


def _manifest(directory: Path) -> dict:
    path = directory / MANIFEST
    if not path.is_file():
        raise ConfigError(f"{directory}: not a prediction directory (no {MANIFEST})")
    try:
        manifest = loads_json(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        reason = err if isinstance(err, TooDeep) else type(err).__name__
        raise ConfigError(f"{path}: unreadable manifest ({reason})") from None
    problem = _manifest_problem(manifest)
    if problem:
        raise ConfigError(f"{path}: {problem}")
    return manifest


def _manifest_problem(m) -> str:
    if not isinstance(m, dict) or m.get("kind") != KIND:
        return "not a gnnmesh prediction manifest"
    if m.get("version") != VERSION:
        return f"version {m.get('version')!r}; this gnnmesh reads version {VERSION}"
    if m.get("format") not in FORMATS:
        return f"format {m.get('format')!r} is not one of {', '.join(FORMATS)}"
    try:
        dtype = np.dtype(m["dtype"]) if isinstance(m.get("dtype"), str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None:
        return f"dtype {_show(m.get('dtype'))} is not a NumPy dtype"
    if dtype.kind not in "fiu":
        return f"dtype {dtype} is not numeric"
    width = m.get("width", 0)
    if width is not None and not (_count(width) and width > 0):
        return "'width' is not a positive integer or null"
    graph = m.get("graph")
    if not (isinstance(graph, dict) and _count(graph.get("nodes"))):
        return "'graph' does not give the number of nodes"
    parts = m.get(PARTS)
    if not (isinstance(parts, list) and all(isinstance(p, dict) and _count(p.get("rows")) for p in parts)):
        return f"'{PARTS}' is not a list of parts"
    names = [p.get(k) for p in parts for k in (("ids", "values") if m["format"] == "npy" else ("file",))]
    if not all(isinstance(n, str) and n and Path(n).name == n and not n.startswith(".") for n in names):
        return "a part's file name is not a plain file name in the directory"
    if not (_count(m.get("rows")) and m["rows"] == sum(p["rows"] for p in parts)):
        return "'rows' is not the parts' rows"
    return ""


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _read_part(directory: Path, manifest: dict, part: dict) -> tuple:
    rows, width, dtype = part["rows"], manifest["width"], np.dtype(manifest["dtype"])
    shape = (rows,) if width is None else (rows, width)
    if manifest["format"] == "npy":
        ids = _npy(directory / part["ids"], (rows,), np.dtype(np.int64))
        return ids, _npy(directory / part["values"], shape, dtype)
    pa, pq = _pyarrow()
    path = directory / part["file"]
    try:
        table = pq.read_table(path)
        ids = table.column("id").to_numpy()
        column = table.column("value").combine_chunks()
        values = column.to_numpy(zero_copy_only=False) if width is None else \
            column.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable part ({type(err).__name__})") from None
    if ids.shape != (rows,) or values.shape != shape or values.dtype != dtype or ids.dtype != np.int64:
        raise ConfigError(f"{path}: holds {values.dtype} {values.shape}, the manifest says {dtype} {shape}")
    return ids, values


def _npy(path: Path, shape: tuple, dtype: np.dtype) -> np.ndarray:
    if not path.is_file():
        raise ConfigError(f"{path}: missing (the manifest lists it)")
    try:
        array = np.load(path, allow_pickle=False)
    except Exception as err:  # numpy raises several types for a damaged header
        raise ConfigError(f"{path}: unreadable .npy file ({' '.join(str(err).split())[:160]})") from None
    if not isinstance(array, np.ndarray):  # a .npz archive under the name
        raise ConfigError(f"{path}: not a .npy file")
    if array.shape != shape or array.dtype != dtype:
        raise ConfigError(f"{path}: holds {array.dtype} {array.shape}, the manifest says {dtype} {shape}")
    return array
