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

A link model's predictions carry more than one array per row: the columns listed under the
manifest's ``"extra"`` (the candidates of a top-K list; the pairs scored) sit beside the values,
as ``NAME-RRRRR.npy`` files or parquet columns. Their rows are named by node ids, or, where
the manifest's ``"index"`` is ``"pairs"``, by each pair's place in the file it was read from.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
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
INDEXES = ("nodes", "pairs")  # what a row's id names: a node, or a pair's place in the pairs file


@dataclass
class Prediction:
    """Rows read back from a prediction directory, in global id order."""

    ids: np.ndarray      # int64 [rows]: node ids (pairs: each pair's place in its file)
    values: np.ndarray   # [rows, width] (labels, pair scores: [rows])
    manifest: dict
    extra: dict = field(default_factory=dict)  # name -> [rows, ...]: a top-K list's candidates, the pairs

    def __len__(self) -> int:
        return len(self.ids)


def write(directory, ids: np.ndarray, values: np.ndarray, info: dict, fmt: str = "npy", comm=None,
          extra: Optional[dict] = None) -> Optional[dict]:
    """Write this rank's rows (global ``ids``, ``values``) into ``directory``; ``comm``: the
    job's communicator (None: one process). ``info``: what the manifest records besides the
    parts. ``extra``: further arrays of the same rows, by name. Every rank calls it; rank 0
    returns the manifest."""
    extra = dict(extra or {})
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
        part = together(lambda: _guarded(directory, lambda: _write_part(Path(staged), rank, ids, values, fmt, extra)))
        parts = comm.all_gather_object(part) if comm is not None else [part]

        def finish():
            if rank != 0:
                return None
            manifest = {"kind": KIND, "version": VERSION, "format": fmt, **info,
                        "rows": sum(p["rows"] for p in parts), "width": None if values.ndim == 1 else
                        int(values.shape[1]), "dtype": str(values.dtype), PARTS: parts}
            if extra:
                manifest["extra"] = {name: {"dtype": str(a.dtype), "width": None if a.ndim == 1 else int(a.shape[1])}
                                     for name, a in extra.items()}
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


def _write_part(staged: Path, rank: int, ids: np.ndarray, values: np.ndarray, fmt: str, extra: dict) -> dict:
    entry = {"rank": rank, "rows": int(len(ids))}
    if fmt == "npy":
        entry.update(ids=f"ids-{rank:05d}.npy", values=f"values-{rank:05d}.npy")
        entry.update({name: f"{name}-{rank:05d}.npy" for name in extra})
        np.save(staged / entry["ids"], np.ascontiguousarray(ids, dtype=np.int64))
        np.save(staged / entry["values"], np.ascontiguousarray(values))
        for name, array in extra.items():
            np.save(staged / entry[name], np.ascontiguousarray(array))
        return entry
    pa, pq = _pyarrow()
    entry["file"] = f"part-{rank:05d}.parquet"
    columns = {"id": pa.array(ids.astype(np.int64)), "value": _column(pa, values)}
    columns.update({name: _column(pa, array) for name, array in extra.items()})
    pq.write_table(pa.table(columns), staged / entry["file"])
    return entry


def _column(pa, values: np.ndarray):
    """A parquet column of ``values``: a list per row for a matrix."""
    if values.ndim == 1:
        return pa.array(values)
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), values.shape[1])


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
    columns = ["ids", "values", *manifest.get("extra", {})]
    read_parts = [_read_part(directory, manifest, part) for part in manifest[PARTS]]
    got = {name: [p[name] for p in read_parts] for name in columns}
    got = {name: np.concatenate(arrays) if arrays else
           np.empty(0, dtype=np.int64 if name == "ids" else _dtype(manifest, name)) for name, arrays in got.items()}
    order = np.argsort(got["ids"], kind="stable")
    got = {name: array[order] for name, array in got.items()}
    ids = got["ids"]
    if manifest.get("index", "nodes") == "pairs":  # each row a pair, by its place in the pairs file
        end, what, whose = manifest["rows"], "pair", "the pairs scored"
    else:
        end, what, whose = manifest["graph"]["nodes"], "node", "the graph's"
    if len(ids) and (ids[0] < 0 or ids[-1] >= end):
        raise ConfigError(f"{directory}: {what} ids outside 0 to {end - 1} ({whose})")
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        raise ConfigError(f"{directory}: {what} {int(ids[1:][ids[1:] == ids[:-1]][0])} is written by two parts")
    return Prediction(ids, got["values"], manifest, {name: got[name] for name in columns[2:]})


def _dtype(manifest: dict, name: str) -> np.dtype:
    return np.dtype(manifest["dtype"] if name == "values" else manifest["extra"][name]["dtype"])


def _width(manifest: dict, name: str):
    return manifest["width"] if name == "values" else manifest["extra"][name]["width"]


def written_files(directory) -> list:
    """The files the prediction in ``directory`` consists of: its manifest and the parts it
    lists (ConfigError when the manifest is not a prediction's)."""
    manifest = _manifest(Path(directory))
    return [MANIFEST] + [part[name] for part in manifest[PARTS] for name in _file_keys(manifest)]


def _file_keys(manifest: dict) -> tuple:
    """The keys of a part's entry that name its files."""
    if manifest["format"] != "npy":
        return ("file",)
    return ("ids", "values", *manifest.get("extra", {}))


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
    if m.get("index", "nodes") not in INDEXES:
        return f"index {_show(m.get('index'))} is not one of {', '.join(INDEXES)}"
    extra = m.get("extra", {})
    if not isinstance(extra, dict):
        return "'extra' is not a table of columns"
    for name, column in extra.items():
        problem = _column_problem(name, column)
        if problem:
            return problem
    graph = m.get("graph")
    if not (isinstance(graph, dict) and _count(graph.get("nodes"))):
        return "'graph' does not give the number of nodes"
    parts = m.get(PARTS)
    if not (isinstance(parts, list) and all(isinstance(p, dict) and _count(p.get("rows")) for p in parts)):
        return f"'{PARTS}' is not a list of parts"
    names = [p.get(k) for p in parts for k in _file_keys(m)]
    if not all(isinstance(n, str) and n and Path(n).name == n and not n.startswith(".") for n in names):
        return "a part's file name is not a plain file name in the directory"
    if not (_count(m.get("rows")) and m["rows"] == sum(p["rows"] for p in parts)):
        return "'rows' is not the parts' rows"
    return ""


def _column_problem(name, column) -> str:
    """What is wrong with the manifest's entry ``column`` of an extra column ``name`` ("" if nothing)."""
    if not (isinstance(name, str) and name.isidentifier() and name not in ("ids", "values", "file", "rank", "rows")):
        return f"extra column {_show(name)} is not a plain name"
    if not isinstance(column, dict):
        return f"extra column {name!r} is not described"
    try:
        dtype = np.dtype(column["dtype"]) if isinstance(column.get("dtype"), str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.kind not in "fiu":
        return f"extra column {name!r}: dtype {_show(column.get('dtype'))} is not a numeric NumPy dtype"
    width = column.get("width", 0)
    if width is not None and not (_count(width) and width > 0):
        return f"extra column {name!r}: 'width' is not a positive integer or null"
    return ""


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _read_part(directory: Path, manifest: dict, part: dict) -> dict:
    """{"ids": ..., "values": ..., and each extra column} of one part, each checked."""
    rows = part["rows"]
    names = ["values", *manifest.get("extra", {})]
    want = {name: (_dtype(manifest, name), (rows,) if _width(manifest, name) is None else
                   (rows, _width(manifest, name))) for name in names}
    if manifest["format"] == "npy":
        got = {"ids": _npy(directory / part["ids"], (rows,), np.dtype(np.int64))}
        got.update({name: _npy(directory / part[name], shape, dtype) for name, (dtype, shape) in want.items()})
        return got
    pa, pq = _pyarrow()
    path = directory / part["file"]
    try:
        table = pq.read_table(path)
        got = {"ids": table.column("id").to_numpy()}
        for name, (dtype, shape) in want.items():
            column = table.column("value" if name == "values" else name).combine_chunks()
            got[name] = column.to_numpy(zero_copy_only=False) if len(shape) == 1 else \
                column.flatten().to_numpy(zero_copy_only=False).reshape(-1, shape[1])
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable part ({type(err).__name__})") from None
    if got["ids"].shape != (rows,) or got["ids"].dtype != np.int64:
        raise ConfigError(f"{path}: holds ids {got['ids'].dtype} {got['ids'].shape}, the manifest says int64 {(rows,)}")
    for name, (dtype, shape) in want.items():
        if got[name].shape != shape or got[name].dtype != dtype:
            raise ConfigError(f"{path}: holds {got[name].dtype} {got[name].shape}, the manifest says {dtype} {shape}")
    return got


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
