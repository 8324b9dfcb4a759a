"""Columns of numbers from a user's files: delimited text (CSV, TSV, whitespace; gzipped or
not), Parquet (through pyarrow, the ``parquet`` extra) and ``.npy`` arrays.

A column is picked by its header name or by its 0-based position. Every bad value is one
GraphError naming the file and the line (text), the row (Parquet) or the array (``.npy``);
``Rows.error`` gives those messages to the id checks that the edge-list reader shares.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ..errors import GraphError
from ._io import read_bytes, read_raw
from ._text import parse_table

PARQUET_SUFFIXES = (".parquet", ".pq")
DELIMITERS = {",": b",", "tab": b"\t", "\t": b"\t", " ": b" ", ";": b";", "|": b"|"}
PARQUET_EXTRA = "pip install 'gnnmesh[parquet]'"
_EXACT_FLOAT_INT = 2**53  # ids read as floats are exact below this

Pick = Union[str, int]  # a column's header name or 0-based position


def kind_of(path: Path) -> str:
    """'parquet', 'npy' or 'text', from the file's name."""
    name = path.name.lower()
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(".npy"):
        return "npy"
    return "text"


@dataclass
class Rows:
    """Where each row of a column came from, for messages: text lines or Parquet rows."""
    source: str
    lines: Optional[np.ndarray]  # 1-based line of each row (text); None: the row's number
    count: int

    def __len__(self) -> int:
        return self.count

    def error(self, row: int, message: str) -> GraphError:
        where = f"line {int(self.lines[row])}" if self.lines is not None else f"row {row + 1}"
        return GraphError(f"{self.source} {where}: {message}")


@dataclass
class Columns:
    """The picked columns of one file, in the order asked, and where their rows came from."""
    values: list
    rows: Rows


def read_columns(path: Path, picks: Sequence[Pick], *, header: bool = False,
                 delimiter: Optional[str] = None) -> Columns:
    """The columns ``picks`` of a text or Parquet file, as float64 or int64 arrays."""
    if kind_of(path) == "parquet":
        return _parquet_columns(path, picks)
    if kind_of(path) == "npy":
        raise GraphError(f"{path}: a .npy file holds one array, not named columns; use a text "
                         f"or Parquet file here")
    return _text_columns(path, picks, header, delimiter)


def _text_columns(path: Path, picks, header: bool, delimiter: Optional[str]) -> Columns:
    values, names, rows = _text_table(path, header, delimiter)
    return Columns([values[:, _position(path, p, names, values.shape[1])] for p in picks], rows)


def _text_table(path: Path, header: bool, delimiter: Optional[str]) -> tuple:
    """(values [rows, columns] float64, the header's names, where the rows came from)."""
    data = read_bytes(path)
    if delimiter is not None and DELIMITERS[delimiter] not in b", \t":
        data = data.replace(DELIMITERS[delimiter], b" ")  # the parser splits at spaces
    table = parse_table(data, path, columns=None, int_columns=0, names=(), allow_header=header)
    if header and table.header is None and len(table):
        raise table.error(0, "the description says header = true, but this line holds numbers")
    names = table.header or []
    values = table.floats if table.floats is not None else np.zeros((len(table), len(names)))
    if names and values.shape[1] != len(names):
        raise table.error(0, f"{values.shape[1]} columns, but the header names {len(names)}")
    return values, names, Rows(str(path), table.lines, len(table))


def _position(path: Path, pick: Pick, names: list, width: int) -> int:
    if isinstance(pick, str):
        if pick not in names:
            shown = ", ".join(names) if names else "none: the file has no header line"
            raise GraphError(f"{path}: no column '{pick}' (columns: {shown})")
        return names.index(pick)
    if width == 0:
        raise GraphError(f"{path}: no rows of numbers (only comments, a header or blank lines)")
    if not 0 <= pick < width:
        raise GraphError(f"{path}: no column at position {pick} (the file has {width} columns, "
                         f"positions from 0)")
    return pick


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    return pq


def _parquet_table(path: Path):
    pq = _pyarrow_parquet()
    if pq is None:
        raise GraphError(f"{path}: reading Parquet needs pyarrow, the 'parquet' extra: "
                         f"{PARQUET_EXTRA}")
    raw = read_raw(path)
    try:
        import pyarrow as pa
        return pq.read_table(pa.BufferReader(raw))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others for damaged files
        raise GraphError(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())})") from exc


def _parquet_columns(path: Path, picks) -> Columns:
    table = _parquet_table(path)
    names = list(table.column_names)
    values = []
    for pick in picks:
        name = names[_position(path, pick, names, len(names))]
        column = table.column(name)
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise GraphError(f"{path} row {row + 1}: column '{name}' is empty (null)")
        try:
            array = column.to_numpy()
        except Exception as exc:  # a nested or otherwise unconvertible column
            raise GraphError(f"{path}: column '{name}' does not hold numbers ({column.type})") from exc
        values.append(_numeric(array, f"{path}: column '{name}'"))
    return Columns(values, Rows(str(path), None, table.num_rows))


def _numeric(array: np.ndarray, where: str) -> np.ndarray:
    if array.dtype.kind not in "biuf":
        raise GraphError(f"{where} must hold numbers, got {array.dtype}")
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array)
        if bad.any():
            raise GraphError(f"{where} row {int(np.flatnonzero(bad)[0]) + 1}: non-finite value "
                             f"{array[bad][0]!r}")
    return array


def all_columns(path: Path, *, header: bool = False, delimiter: Optional[str] = None) -> Columns:
    """Every column of a text or Parquet file (a feature matrix), in file order."""
    if kind_of(path) == "parquet":
        return _parquet_columns(path, range(len(_parquet_table(path).column_names)))
    values, _, rows = _text_table(path, header, delimiter)
    return Columns([values[:, i] for i in range(values.shape[1])], rows)


def read_npy(path: Path) -> np.ndarray:
    """A ``.npy`` array of numbers (booleans too), read without pickle."""
    raw = read_raw(path)
    try:
        array = np.load(io.BytesIO(raw), allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError, EOFError, OSError... for damaged bytes
        raise GraphError(f"{path}: not a readable .npy array ({' '.join(str(exc).split())})") from exc
    if not isinstance(array, np.ndarray):
        raise GraphError(f"{path}: expected one .npy array, got an archive of several")
    return _numeric(array, str(path))


def as_ids(values: np.ndarray, rows: Rows, what: str) -> np.ndarray:
    """Whole numbers as int64; the first value that is none is named by its line or row."""
    if values.dtype.kind in "iu":
        return values.astype(np.int64)
    if values.dtype.kind == "b":
        raise GraphError(f"{rows.source}: {what}s must be whole numbers, got booleans")
    bad = ~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) >= _EXACT_FLOAT_INT)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise rows.error(row, f"{what} {values[row]!r} is not a whole number below 2**53")
    return values.astype(np.int64)
