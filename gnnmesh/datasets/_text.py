"""Fast parsing of whitespace/comma separated numeric tables (edge lists, label files).

The common path is vectorised: numpy finds the tokens of every line (to check that all
lines have the same number of columns and to know each row's line number) and
``np.fromstring`` converts the numbers in C. Only when that fails does a Python loop walk
the lines to find and name the offending one, so good files stay fast and bad files get
a message like ``edges.txt line 7: non-integer node id '3.5'``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .. import progress
from ..errors import GraphError

# Separators other than ' ' and '\n' become spaces; '\r' too, so CRLF files parse as LF.
_SEPARATORS = bytes.maketrans(b",\t\r\v\f", b"     ")
_COMMENT = (ord("#"), ord("%"))


@dataclass
class Table:
    ints: np.ndarray              # [rows, int_columns] int64
    floats: Optional[np.ndarray]  # [rows, other columns] float64, or None
    lines: np.ndarray             # 1-based line number of every row
    header: Optional[list]        # tokens of a skipped header line
    source: str

    def __len__(self) -> int:
        return int(self.lines.shape[0])

    def error(self, row: int, message: str) -> GraphError:
        return GraphError(f"{self.source} line {int(self.lines[row])}: {message}")


# What numpy's text parser accepts as a number (Python's float() also takes '1_0').
_NUMBER = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", re.I)


def _is_number(token: bytes) -> bool:
    return _NUMBER.fullmatch(token) is not None


def _is_integer(token: bytes) -> bool:
    if not _is_number(token):
        return False
    value = float(token)
    return value == value and abs(value) != float("inf") and value == round(value)


_CHUNK_BYTES = 2 << 20  # pieces that stay in CPU cache: faster, and temporaries stay small


@dataclass
class _State:
    """What carries over from one chunk to the next."""
    source: str
    columns: Optional[Sequence[int]]
    int_columns: int
    names: Sequence[str]
    header_pending: bool        # the first data line may still turn out to be a header
    header: Optional[list] = None
    ncols: Optional[int] = None
    first_line: int = 0         # file line that fixed ncols, for messages


def parse_table(data: bytes, source, *, columns: Optional[Sequence[int]] = (2, 3),
                int_columns: int = 2,
                names: Sequence[str] = ("node id", "node id", "weight"),
                allow_header: bool = False) -> Table:
    """Parse ``data`` into rows of numbers.

    Lines that are blank or start with ``#`` or ``%`` are skipped. Every other line must have
    the same number of columns, one of ``columns`` (any number when None, e.g. a feature
    matrix). The first ``int_columns`` columns must hold integers, the rest finite numbers.
    ``names[i]`` names column ``i`` in messages (columns past the names: by number).
    ``allow_header``: the first non-comment line may be a header of non-numbers.
    """
    state = _State(str(source), columns, int_columns, names, allow_header)
    parts = []
    lines_before = 0
    with progress.phase(f"parsing {state.source}", total=len(data)) as shown:
        for start, end in _chunks(data):
            chunk = data[start:end]
            part = _parse_chunk(chunk, lines_before, state)
            if part is not None:
                parts.append(part)
            lines_before += chunk.count(b"\n")
            shown.update(end)
    if not parts:
        return Table(np.zeros((0, int_columns), np.int64), None, np.zeros(0, np.int64),
                     state.header, state.source)
    ints = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    floats = None
    if parts[0][1] is not None:
        floats = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    lines = np.concatenate([p[2] for p in parts]) if len(parts) > 1 else parts[0][2]
    return Table(ints, floats, lines, state.header, state.source)


def _chunks(data: bytes):
    """(start, end) byte ranges of about _CHUNK_BYTES, each ending after a newline."""
    pos, n = 0, len(data)
    while pos < n:
        end = min(pos + _CHUNK_BYTES, n)
        if end < n:
            cut = data.rfind(b"\n", pos, end)
            end = cut + 1 if cut >= 0 else (data.find(b"\n", end) + 1 or n)
        yield pos, end
        pos = end


def _parse_chunk(chunk: bytes, lines_before: int, state: _State):
    source = state.source
    text = chunk.translate(_SEPARATORS)
    buf = np.frombuffer(text, dtype=np.uint8)
    n = buf.shape[0]
    if n == 0:
        return None

    newline = np.flatnonzero(buf == 10)
    space = (buf == 32) | (buf == 10)
    starts = ~space
    starts[1:] &= space[:-1]                       # first byte of every token
    upto = np.cumsum(starts, dtype=np.int32)        # tokens seen up to each byte
    line_start = np.concatenate(([0], newline + 1))
    line_end = np.append(newline, n - 1)            # inclusive; the last line may lack '\n'
    counts = np.diff(upto[line_end], prepend=0)     # tokens per line
    if line_start[-1] == n:                         # trailing '\n': no real last line
        line_start, line_end, counts = line_start[:-1], line_end[:-1], counts[:-1]

    skip = np.zeros(counts.shape[0], dtype=bool)
    marks = np.flatnonzero((buf == _COMMENT[0]) | (buf == _COMMENT[1]))
    if marks.size:
        marks = marks[starts[marks]]
        line_of = np.searchsorted(newline, marks)
        before = np.where(line_start[line_of] > 0, upto[np.maximum(line_start[line_of] - 1, 0)], 0)
        first_token = upto[marks] - before == 1
        skip[line_of[first_token]] = True
    data_lines = np.flatnonzero((counts > 0) & ~skip)
    if data_lines.size == 0:
        return None

    def line_tokens(i: int) -> list:
        return text[line_start[i]:line_end[i] + 1].split()

    def lineno(i) -> int:
        return lines_before + int(i) + 1

    if state.header_pending:
        state.header_pending = False
        tokens = line_tokens(int(data_lines[0]))
        if not all(_is_number(t) for t in tokens):
            state.header = [t.decode("utf-8", "replace") for t in tokens]
            skip[data_lines[0]] = True
            data_lines = data_lines[1:]
            if data_lines.size == 0:
                return None

    if state.ncols is None:
        state.ncols, state.first_line = int(counts[data_lines[0]]), lineno(data_lines[0])
        if state.columns is not None and state.ncols not in state.columns:
            want = " or ".join(str(c) for c in state.columns)
            raise GraphError(f"{source} line {state.first_line}: expected {want} columns, "
                             f"got {state.ncols}")
    ncols = state.ncols
    odd = data_lines[counts[data_lines] != ncols]
    if odd.size:
        i = int(odd[0])
        raise GraphError(f"{source} line {lineno(i)}: expected {ncols} columns (as on line "
                         f"{state.first_line}), got {int(counts[i])}")

    skipped = skip & (counts > 0)
    if skipped.any():  # blank out comment/header lines so the C parser sees only numbers
        lengths = np.diff(np.append(line_start, n))
        blank = buf.copy()
        blank[np.repeat(skipped, lengths)] = 32
        text_for_numbers = blank.tobytes()
    else:
        text_for_numbers = text

    names, int_columns = state.names, state.int_columns
    values = _fast_numbers(text_for_numbers, data_lines.size * ncols)
    if values is None:
        _raise_first_bad_token(data_lines, line_tokens, lineno, int_columns, names, source)
        raise GraphError(f"{source}: could not parse the numbers in this file")  # not reached
    values = values.reshape(-1, ncols)

    lines = data_lines.astype(np.int64) + (lines_before + 1)
    k = min(int_columns, ncols)
    ints = values[:, :k]
    if values.dtype == np.int64:  # the parser saturates a number beyond 64 bits to the extreme value
        limit = np.iinfo(np.int64)
        for row, col in np.argwhere((values == limit.max) | (values == limit.min)):
            token = line_tokens(int(data_lines[row]))[col].decode("utf-8", "replace")
            if token.lstrip("+") != str(values[row, col]):
                raise GraphError(f"{source} line {lines[row]}: {_column_name(names, col)} too large "
                                 f"(beyond 64-bit integers) '{token}'")
    if ints.dtype != np.int64:
        checks = ((~np.isfinite(ints) | (ints != np.round(ints)), "non-integer {}"),
                  # read as floats, integers are exact only below 2**53
                  (np.abs(ints) >= _EXACT_FLOAT_INT, "{} too large to read exactly (2**53 or more)"))
        for bad, problem in checks:
            if bad.any():
                row, col = (int(v) for v in np.argwhere(bad)[0])
                token = line_tokens(int(data_lines[row]))[col].decode("utf-8", "replace")
                raise GraphError(f"{source} line {lines[row]}: {problem.format(names[col])} '{token}'")
        ints = ints.astype(np.int64)
    floats = None
    if ncols > k:
        floats = values[:, k:].astype(np.float64, copy=False)
        bad = ~np.isfinite(floats)
        if bad.any():
            row, col = (int(v) for v in np.argwhere(bad)[0])
            token = line_tokens(int(data_lines[row]))[k + col].decode("utf-8", "replace")
            raise GraphError(f"{source} line {lines[row]}: non-finite {_column_name(names, k + col)} "
                             f"'{token}'")
    return np.ascontiguousarray(ints), floats, lines


_EXACT_FLOAT_INT = 2**53


def _fast_numbers(text: bytes, expected: int) -> Optional[np.ndarray]:
    """All numbers in ``text`` (int64 when they all are integers), or None if any token is
    not a number. ``np.fromstring`` raises on trailing garbage in recent numpy and warns in
    older versions; both mean 'take the slow path'."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for dtype in (np.int64, np.float64):
            try:
                values = np.fromstring(text, dtype=dtype, sep=" ")
            except (ValueError, DeprecationWarning):
                continue
            if values.size == expected:
                return values
    return None


def _column_name(names: Sequence[str], col: int) -> str:
    return names[col] if col < len(names) else f"value in column {col + 1}"


def _raise_first_bad_token(data_lines, line_tokens, lineno, int_columns, names, source):
    for i in data_lines:
        for col, token in enumerate(line_tokens(int(i))):
            shown = token.decode("utf-8", "replace")
            name = _column_name(names, col)
            if col < int_columns:
                if not _is_integer(token):
                    raise GraphError(f"{source} line {lineno(i)}: non-integer {name} '{shown}'")
            elif not _is_number(token):
                raise GraphError(f"{source} line {lineno(i)}: {name} '{shown}' is not a number")
