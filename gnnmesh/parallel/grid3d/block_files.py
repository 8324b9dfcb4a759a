"""Parallel data loading (Plexus §5.4): cut a graph into 2D block files once, then let each
rank read only the files of its own block, never the whole graph.

A block-file directory holds:

    manifest.json                        what was written; read first, written last
    adj-<i>-<j>.{indptr,indices}.npy     block (i, j) of the (permuted) adjacency: rows
    [adj-<i>-<j>.values.npy]             row_bounds[i]:row_bounds[i+1], columns
                                         col_bounds[j]:col_bounds[j+1], CSR with block-local
                                         row and column ids (int64; float32 values if weighted)
    <field>-<i>.npy                      row block i of a vertex field (x, y, masks), in the
                                         adjacency's row order; a sparse x is stored as
                                         <field>-<i>.{indptr,indices,values}.npy

Plain ``.npy`` files, so a reader memory-maps a block file and copies it once into its merged
block. The directory is built under a temporary name and renamed into place, so a reader
sees either the old complete set or the new one.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import scipy.sparse as sp
import torch

from ...atomic import OutputKind, staged_directory
from ...errors import ConfigError, GraphError
from ...graph import Adjacency, Graph, check_csr, check_vertex_data, sparse_csr
from ...layout.ranges import block_bounds
from ...memory import peak_rss_mib
from ...partition.base import graph_key
from ...parts.store import load_versioned
from .permutation import check_grid, inverse, permutations, permute_adjacency

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_ANY = object()  # "no expectation" for open_block_files, where None is a meaningful seed


def write_block_files(graph: Graph, directory, grid, seed: Optional[int] = None, *,
                 swap: bool = False) -> Path:
    """Write ``graph`` as ``R x C`` block files into ``directory`` (replacing an earlier set of them).

    ``seed=None`` keeps the original order; otherwise rows and columns are renumbered with
    ``P_r, P_c = permutations(n, seed)``, i.e. the blocks are those of ``P_r A P_c^T`` and the
    vertex fields are in ``P_r`` order. ``swap`` writes the second matrix of the double
    permutation instead, ``P_c A P_r^T`` (vertex fields in ``P_c`` order).
    """
    adj = graph.adj
    rows, cols = check_grid(grid, adj.shape)
    row_perm = col_perm = None
    if seed is not None:
        seed = int(seed)
        row_perm, col_perm = permutations(adj.shape[0], seed)
        if swap:
            row_perm, col_perm = col_perm, row_perm
    row_bounds, col_bounds = block_bounds(adj.shape[0], rows), block_bounds(adj.shape[1], cols)
    with staged_directory(directory, OUTPUT) as tmp:
        mat = permute_adjacency(adj, row_perm, col_perm).to_scipy()
        nnz = _write_blocks(mat, tmp, row_bounds, col_bounds, adj.values is not None)
        del mat
        order = None if row_perm is None else inverse(row_perm)
        fields = _write_vertex_fields(graph, tmp, row_bounds, order)
        manifest = {"format": FORMAT_VERSION, "name": graph.name, "fingerprint": graph_key(adj),
                    "shape": list(adj.shape), "grid": [rows, cols], "seed": seed, "swap": bool(swap),
                    "weighted": adj.values is not None, "directed": graph.directed,
                    "num_classes": graph.num_classes, "row_bounds": row_bounds.tolist(),
                    "col_bounds": col_bounds.tolist(), "nnz": nnz.tolist(), "fields": fields}
        with open(tmp / MANIFEST, "w") as fh:
            json.dump(manifest, fh)
    return Path(directory)


def _write_blocks(mat: sp.csr_matrix, out: Path, row_bounds, col_bounds, weighted: bool):
    nnz = np.zeros((len(row_bounds) - 1, len(col_bounds) - 1), dtype=np.int64)
    for i in range(nnz.shape[0]):
        slab = mat[row_bounds[i]:row_bounds[i + 1]]
        for j in range(nnz.shape[1]):
            block = slab[:, col_bounds[j]:col_bounds[j + 1]]
            block.sort_indices()
            stem = out / f"adj-{i}-{j}"
            np.save(f"{stem}.indptr.npy", block.indptr.astype(np.int64), allow_pickle=False)
            np.save(f"{stem}.indices.npy", block.indices.astype(np.int64), allow_pickle=False)
            if weighted:
                np.save(f"{stem}.values.npy", block.data.astype(np.float32), allow_pickle=False)
            nnz[i, j] = block.nnz
    return nnz


def _write_vertex_fields(graph: Graph, out: Path, row_bounds, order) -> dict:
    """Row blocks of every vertex field; ``order[new] = old`` picks the rows (None: as is)."""
    fields = {}
    for name in Graph.VERTEX_FIELDS:
        tensor = getattr(graph, name)
        if tensor is None:
            continue
        sparse = tensor.layout == torch.sparse_csr
        if sparse:
            data = sp.csr_matrix((tensor.values().numpy(), tensor.col_indices().numpy(),
                                  tensor.crow_indices().numpy()), shape=tuple(tensor.shape))
        else:
            data = tensor.detach().cpu().numpy()
        for i in range(len(row_bounds) - 1):
            lo, hi = int(row_bounds[i]), int(row_bounds[i + 1])
            piece = data[lo:hi] if order is None else data[order[lo:hi]]
            if sparse:
                for part, arr in (("indptr", piece.indptr.astype(np.int64)),
                                  ("indices", piece.indices.astype(np.int64)),
                                  ("values", piece.data.astype(np.float32))):
                    np.save(out / f"{name}-{i}.{part}.npy", arr, allow_pickle=False)
            else:
                np.save(out / f"{name}-{i}.npy", np.ascontiguousarray(piece), allow_pickle=False)
        fields[name] = {"layout": "sparse" if sparse else "dense",
                        "dtype": str(tensor.dtype).replace("torch.", ""),
                        "shape": list(tensor.shape)}
    return fields


# -- reading -----------------------------------------------------------------------------

def written_files(directory) -> list:
    """The files the block-file directory ``directory`` consists of: the manifest, and every block and
    every vertex field's row blocks it describes (a GraphError when the manifest is not a
    block-file directory's)."""
    m = open_block_files(directory).manifest
    (rows, cols), names = m["grid"], [MANIFEST]
    parts = ("indptr", "indices") + (("values",) if m["weighted"] else ())
    names += [f"adj-{i}-{j}.{part}.npy" for i in range(rows) for j in range(cols) for part in parts]
    for field, info in m["fields"].items():
        pieces = ("indptr", "indices", "values") if info["layout"] == "sparse" else None
        names += [f"{field}-{i}.{piece}.npy" for i in range(rows) for piece in pieces] if pieces else \
            [f"{field}-{i}.npy" for i in range(rows)]
    return names


OUTPUT = OutputKind("block-file directory", MANIFEST, written_files)  # what ``write_block_files`` may replace


def open_block_files(directory, *, fingerprint=None, grid=None, seed=_ANY) -> "BlockFiles":
    """The block files in ``directory``. Given ``fingerprint`` (``partition.graph_key`` of the
    graph), ``grid`` or ``seed``, a set written for another graph, grid or permutation is a
    ConfigError naming the manifest; a missing or damaged manifest is a GraphError."""
    path = Path(directory) / MANIFEST
    try:
        manifest = load_versioned(path, FORMAT_VERSION)
        files = BlockFiles(Path(directory), manifest)
    except FileNotFoundError:
        raise GraphError(f"{path}: missing; not a block-file directory (write one with "
                         "'gnnmesh partition --strategy grid3d --grid R,C --write-shards DIR')") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GraphError(f"{path}: unreadable block-file manifest: {' '.join(str(exc).split())}") from None
    if fingerprint is not None and manifest["fingerprint"] != fingerprint:
        raise ConfigError(f"{path}: the block files are of another graph ({manifest['name']}, "
                          f"fingerprint {manifest['fingerprint']}, expected {fingerprint})")
    if grid is not None and tuple(int(g) for g in grid) != files.grid:
        raise ConfigError(f"{path}: the blocks are cut {files.grid[0]} x {files.grid[1]}, "
                          f"expected {int(grid[0])} x {int(grid[1])}")
    if seed is not _ANY and manifest["seed"] != seed:
        raise ConfigError(f"{path}: the block files use permutation seed {manifest['seed']}, "
                          f"expected {seed}")
    return files


class BlockFiles:
    """An opened set of block files: reads and merges the blocks one rank needs."""

    def __init__(self, directory: Path, manifest: dict):
        _check_manifest(manifest)
        self.directory = directory
        self.manifest = manifest
        self.shape = tuple(int(s) for s in manifest["shape"])
        self.grid = tuple(int(g) for g in manifest["grid"])
        self.row_bounds = np.asarray(manifest["row_bounds"], dtype=np.int64)
        self.col_bounds = np.asarray(manifest["col_bounds"], dtype=np.int64)
        self.nnz = np.asarray(manifest["nnz"], dtype=np.int64)

    def block(self, rows, cols) -> Adjacency:
        """Row blocks ``rows`` x column blocks ``cols`` (an index, ``(start, stop)`` or a
        range of consecutive blocks) merged into one CSR Adjacency with local ids: row 0 is
        ``row_bounds[rows.start]``, column 0 is ``col_bounds[cols.start]``."""
        rows, cols = _span(rows, self.grid[0], "row"), _span(cols, self.grid[1], "column")
        row_lo, col_lo = self.row_bounds[rows.start], self.col_bounds[cols.start]
        n_rows = int(self.row_bounds[rows.stop] - row_lo)
        shape = (n_rows, int(self.col_bounds[cols.stop] - col_lo))
        weighted = bool(self.manifest["weighted"])
        # Pass 1: row lengths of the merged block, from the small indptr files alone.
        degree = np.zeros(n_rows, dtype=np.int64)
        for i in rows:
            local = slice(self.row_bounds[i] - row_lo, self.row_bounds[i + 1] - row_lo)
            for j in cols:
                degree[local] += np.diff(self._indptr(i, j))
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(degree, out=indptr[1:])
        del degree
        indices = np.empty(int(indptr[-1]), dtype=np.int64)
        values = np.empty(int(indptr[-1]), dtype=np.float32) if weighted else None
        # Pass 2: each file's entries go after those of the files to its left, row by row.
        for i in rows:
            lo, hi = self.row_bounds[i] - row_lo, self.row_bounds[i + 1] - row_lo
            cursor = indptr[lo:hi].copy()  # next free slot of every row of this row block
            for j in cols:
                piece_ptr = self._indptr(i, j)
                width = self.col_bounds[j + 1] - self.col_bounds[j]
                piece_idx = self._array(i, j, "indices", np.int64, piece_ptr[-1], width)
                check_csr(piece_ptr, piece_idx, (len(piece_ptr) - 1, width),  # as every graph's, before use
                          str(self.directory / f"adj-{i}-{j}"), names=("indptr", "indices"), canonical=True)
                offset = self.col_bounds[j] - col_lo
                if len(cols) == 1:  # one file per row: copy straight into place
                    dest = slice(indptr[lo], indptr[hi])
                    np.add(piece_idx, offset, out=indices[dest])
                else:
                    dest = np.repeat(cursor - piece_ptr[:-1], np.diff(piece_ptr))
                    dest += np.arange(dest.shape[0], dtype=np.int64)
                    cursor += np.diff(piece_ptr)
                    indices[dest] = piece_idx + offset
                if weighted:
                    values[dest] = self._array(i, j, "values", np.float32, piece_ptr[-1])
                del piece_idx
        return Adjacency(torch.from_numpy(indptr), torch.from_numpy(indices),
                         None if values is None else torch.from_numpy(values), shape)

    def vertex(self, name: str, rows) -> Optional[torch.Tensor]:
        """Row blocks ``rows`` of vertex field ``name`` (None if the graph has no such field)."""
        info = self.manifest["fields"].get(name)
        if info is None:
            return None
        rows = _span(rows, self.grid[0], "row")
        width = list(info["shape"][1:])
        dtype = np.dtype(info["dtype"])
        if info["layout"] == "sparse":
            pieces = [self._sparse_piece(name, i, width[0]) for i in rows]
            mat = sp.vstack(pieces, format="csr")
            field = sparse_csr(mat.indptr, mat.indices, mat.data, mat.shape)
            self._check_field(name, field, rows)
            return field
        parts = []
        for i in rows:
            expect = [int(self.row_bounds[i + 1] - self.row_bounds[i])] + width
            arr = self._load(self.directory / f"{name}-{i}.npy")
            if list(arr.shape) != expect or arr.dtype != dtype:
                raise GraphError(f"{self.directory / f'{name}-{i}.npy'}: holds {arr.dtype} "
                                 f"{list(arr.shape)}, the manifest says {dtype} {expect}")
            parts.append(arr)
        field = torch.from_numpy(np.concatenate(parts))
        self._check_field(name, field, rows)
        return field

    def _check_field(self, name: str, field: torch.Tensor, rows: range) -> None:
        """The check every graph's vertex data passes (``graph.check_vertex_data``), of one field
        of row blocks ``rows``: finite features, class ids within the classes, boolean masks."""
        n = int(self.row_bounds[rows.stop] - self.row_bounds[rows.start])
        where = f"{self.directory / name}-{rows.start}..{rows.stop - 1}: "
        if name == "x":
            check_vertex_data(where, n, field, None, None, {})
        elif name == "y":
            check_vertex_data(where, n, None, field, self.manifest.get("num_classes"), {})
        else:
            check_vertex_data(where, n, None, None, None, {name: field})

    def vertex_data(self, rows) -> dict:
        """Every stored vertex field for row blocks ``rows``, by name (checked as every graph's
        vertex data is: no two masks share a row, targets are finite in every row of a split)."""
        data = {name: self.vertex(name, rows) for name in self.manifest["fields"]}
        rows = _span(rows, self.grid[0], "row")
        n = int(self.row_bounds[rows.stop] - self.row_bounds[rows.start])
        masks = {name: data.get(name) for name in Graph.VERTEX_FIELDS[2:]}
        check_vertex_data(f"{self.directory}: ", n, None, data.get("y"), self.manifest.get("num_classes"), masks)
        return data

    # -- one file at a time, checked against the manifest ------------------------------
    def _load(self, file: Path) -> np.ndarray:
        try:
            array = np.load(file, mmap_mode="r", allow_pickle=False)
            if not isinstance(array, np.ndarray):  # a .npz archive under the name
                raise ValueError("an archive of several arrays, not one")
            return array
        except FileNotFoundError:
            raise GraphError(f"{file}: missing block file (the block-file directory is incomplete)") from None
        except Exception as exc:  # numpy raises several types for a damaged header
            raise GraphError(f"{file}: unreadable block file: {' '.join(str(exc).split())[:200]}") from None

    def _indptr(self, i: int, j: int) -> np.ndarray:
        file = self.directory / f"adj-{i}-{j}.indptr.npy"
        ptr = np.array(self._load(file))  # small: one entry per row of the block
        n_rows = int(self.row_bounds[i + 1] - self.row_bounds[i])
        if ptr.dtype != np.int64 or ptr.shape != (n_rows + 1,) or ptr[0] != 0 \
                or ptr[-1] != self.nnz[i, j] or np.any(np.diff(ptr) < 0):
            raise GraphError(f"{file}: corrupt block file: expected a nondecreasing int64 row pointer "
                             f"of {n_rows + 1} entries from 0 to {self.nnz[i, j]}")
        return ptr

    def _array(self, i: int, j: int, part: str, dtype, length: int,
               bound: Optional[int] = None) -> np.ndarray:
        file = self.directory / f"adj-{i}-{j}.{part}.npy"
        arr = self._load(file)
        if arr.dtype != dtype or arr.shape != (int(length),):
            raise GraphError(f"{file}: corrupt block file: holds {arr.dtype} {list(arr.shape)}, "
                             f"expected {np.dtype(dtype)} [{int(length)}]")
        if bound is not None and arr.size and (arr.min() < 0 or arr.max() >= bound):
            raise GraphError(f"{file}: corrupt block file: column ids outside 0..{bound - 1}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise GraphError(f"{file}: corrupt block file: a non-finite value at entry "
                             f"{int(np.flatnonzero(~np.isfinite(arr))[0])}")
        return arr

    def _sparse_piece(self, name: str, i: int, width: int) -> sp.csr_matrix:
        stem = self.directory / f"{name}-{i}"
        ptr, idx, val = (self._load(Path(f"{stem}.{p}.npy")) for p in ("indptr", "indices", "values"))
        n_rows = int(self.row_bounds[i + 1] - self.row_bounds[i])
        if ptr.shape != (n_rows + 1,) or idx.shape != val.shape or val.dtype != np.float32:
            raise GraphError(f"{stem}.indptr.npy: corrupt block file: does not match its indices/values")
        check_csr(ptr, idx, (n_rows, width), str(stem), canonical=True)
        return sp.csr_matrix((np.array(val), np.array(idx), np.array(ptr)), shape=(n_rows, width))


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_LIMIT = 2**48  # no graph reaches it; past it a count is damage


def _check_manifest(m: dict) -> None:
    """Raise ValueError naming the first field of the manifest ``m`` that ``write_block_files``
    never writes, so that the files are read against sound sizes (and each array is
    checked as it loads)."""
    def need(field: str, ok, what: str) -> None:
        if not ok:
            raise ValueError(f"field '{field}' must be {what}, got {_show(m.get(field))}")

    def counts(value, length: int, low: int = 0, high: int = _LIMIT) -> bool:
        return isinstance(value, list) and len(value) == length and all(
            isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in value)

    def bounds(value, blocks: int, end: int) -> bool:
        return counts(value, blocks + 1) and value[0] == 0 and value[-1] == end and \
            all(a <= b for a, b in zip(value, value[1:]))

    need("shape", counts(m.get("shape"), 2), "two sizes")
    need("grid", counts(m.get("grid"), 2, 1, 2**31), "two block counts >= 1")
    (n, cols), (r, c) = m["shape"], m["grid"]
    if not all(isinstance(m.get(k), list) and len(m[k]) == size for k, size in
               (("row_bounds", r + 1), ("col_bounds", c + 1), ("nnz", r))):
        raise ValueError(f"bounds or nonzero counts do not match the grid {r} x {c}")
    need("row_bounds", bounds(m.get("row_bounds"), r, n), f"{r + 1} nondecreasing bounds from 0 to {n}")
    need("col_bounds", bounds(m.get("col_bounds"), c, cols), f"{c + 1} nondecreasing bounds from 0 to {cols}")
    need("nnz", isinstance(m.get("nnz"), list) and len(m["nnz"]) == r and all(counts(row, c) for row in m["nnz"]),
         f"{r} lists of {c} entry counts")
    need("weighted", isinstance(m.get("weighted"), bool), "true or false")
    need("num_classes", m.get("num_classes") is None or counts([m["num_classes"]], 1, 1, 2**31),
         "a count of classes or null")
    fields = m.get("fields")
    need("fields", isinstance(fields, dict) and set(fields) <= set(Graph.VERTEX_FIELDS),
         f"an object of vertex fields ({', '.join(Graph.VERTEX_FIELDS)})")
    for name, info in fields.items():
        try:
            kind = np.dtype(info["dtype"]).kind if isinstance(info, dict) and isinstance(info.get("dtype"), str) else ""
        except (TypeError, ValueError):
            kind = ""
        ok = (isinstance(info, dict) and info.get("layout") in ("dense", "sparse") and kind in "biuf" and kind
              and isinstance(info.get("shape"), list) and counts(info["shape"], len(info["shape"]))
              and 1 <= len(info["shape"]) <= 2 and info["shape"][0] == n
              and (info["layout"] == "dense" or len(info["shape"]) == 2))
        if not ok:
            raise ValueError(f"field 'fields.{name}' must be a vertex field's layout, dtype and shape of {n} "
                             f"rows, got {_show(info)}")


def _span(spec, count: int, what: str) -> range:
    """A block index, ``(start, stop)`` pair or range as a non-empty range within ``count``."""
    if isinstance(spec, (int, np.integer)):
        spec = range(int(spec), int(spec) + 1)
    elif not isinstance(spec, range):
        try:
            start, stop = spec
            spec = range(int(start), int(stop))
        except (TypeError, ValueError):
            raise ConfigError(f"{what} blocks must be an index, a (start, stop) pair or a "
                              f"range, got {spec!r}") from None
    if spec.step != 1 or len(spec) == 0 or spec.start < 0 or spec.stop > count:
        raise ConfigError(f"{what} blocks {spec.start}..{spec.stop - 1} are not a non-empty "
                          f"range of consecutive blocks within 0..{count - 1}")
    return spec


def read_cost(directory, blocks: str, timeout: float = 300) -> tuple:
    """(growth of the peak resident memory in bytes, nonzeros read) of reading ``blocks`` of
    the block files in ``directory`` (``BlockFiles.block``'s arguments as a Python literal, e.g.
    ``"(0, (0, 4))"``) in a fresh interpreter that has imported gnnmesh and opened the
    manifest: what one reader pays, apart from any other process's history. A peak started
    anew is the child's own high-water mark: ru_maxrss would start at the parent's peak."""
    done = subprocess.run([sys.executable, "-m", "gnnmesh.parallel.grid3d.block_files", str(directory), blocks],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"reading {blocks} of {directory} failed:\n{done.stderr}")
    grown, nnz = map(int, done.stdout.split())
    return grown, nnz


def _print_read_cost(directory: str, blocks: str) -> None:
    files = open_block_files(directory)
    before = peak_rss_mib()
    block = files.block(*ast.literal_eval(blocks))
    print(int((peak_rss_mib() - before) * 2**20), block.nnz)


if __name__ == "__main__":
    _print_read_cost(*sys.argv[1:3])
