"""Property-based fuzzing of every reader: valid inputs, damaged at random, read back.

Each reader's valid input is built once per module (a graph of 30 nodes); every case
damages a copy in a fresh directory and reads it back in-process. The read must give
exactly what the valid input gives, or raise one ConfigError or GraphError whose message
is one line. Any other exception, a crash, or a different result fails the case.

The damage: files truncated, bytes flipped or inserted; one array of a checksummed
directory rewritten with its checksum recomputed (a bad value, ids swapped, the wrong
length, dtype or shape), so that the damage gets past the checksum; a JSON field set to
an extreme number (0, negative, NaN, infinite, 2**63, 1e308, an integer no float holds),
a string, a bool, a list, an object or a deeply nested value, or deleted; a number in a
text file replaced by one of those. A value no valid input holds must be refused; a
mutation that leaves a valid input of another content is read as what it is where the
format cannot tell (a flipped digit in an edge list): such a case must still read, or
fail in one line, but is not compared.

Readers: checkpoints, parts (each kind, read as its strategy reads a rank), grid3d's block files, the
partition store, metrics and plan files (``gnnmesh report``), rates files (with finite
extremes, priced at the largest sizes), prediction directories, PyG export directories, shard
sets' meta.json, config files, OGB directories, edge lists, MatrixMarket and ``.npz`` files, and
dataset descriptions (a TOML naming CSV, ``.npy`` and text files; its fields set to other values).

Every property runs twice, each time the same cases (a fixed seed): 1,210 cases in all in the
fast suite (``-m "not slow"``) and 7,020 others among the slow tests, about a minute
together on two cores. ``GNNMESH_FUZZ_EXAMPLES=5000 python -m pytest tests/system/test_fuzz.py -m slow``
makes each slow run 5,000 cases drawn afresh every time; a failure prints its case and a
``@reproduce_failure`` line to replay it.
"""

from __future__ import annotations

import gzip
import importlib.util
import inspect
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch

from gnnmesh import ConfigError, GraphError
from gnnmesh.parts.features import MappedFeatures

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.helpers import random_graph  # noqa: E402

EXAMPLES = int(os.environ.get("GNNMESH_FUZZ_EXAMPLES") or 0)


def fuzz(fast: int, slow: int, **strategies):
    """The property ``test`` (the arguments named in ``strategies`` drawn from them, the rest
    fixtures) as one test run twice: ``fast`` cases in the fast suite and ``slow`` others among
    the slow tests, each the same cases every run (a fixed seed). With GNNMESH_FUZZ_EXAMPLES=N
    the slow run is N cases drawn afresh."""
    def wrap(test):
        runs = {}
        for budget, count, fixed in (("fast", fast, 0), ("slow", EXAMPLES or slow, 1)):
            run = settings(max_examples=count, deadline=None, database=None, print_blob=True,
                           suppress_health_check=list(HealthCheck))(given(**strategies)(test))
            runs[budget] = run if EXAMPLES and budget == "slow" else seed(fixed)(run)

        def both(budget, **fixtures):
            runs[budget](**fixtures)

        both.__name__, both.__qualname__, both.__doc__ = test.__name__, test.__qualname__, test.__doc__
        both.__signature__ = inspect.Signature(
            [inspect.Parameter("budget", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
            + list(inspect.signature(runs["fast"]).parameters.values()))
        more = [pytest.mark.slow] + ([pytest.mark.timeout(max(300, EXAMPLES // 5))] if EXAMPLES else [])
        return pytest.mark.parametrize("budget", ["fast", pytest.param("slow", marks=more)])(both)
    return wrap


# -- the property ---------------------------------------------------------------------------

class Refused:
    """What a read that was refused in one line gives (REFUSED)."""


def outcome(read):
    """``read()``'s result, or REFUSED when it raised one ConfigError or GraphError of one line."""
    try:
        return read()
    except (ConfigError, GraphError) as err:
        text = str(err)
        assert text.strip() and "\n" not in text, f"not one line: {text!r}"
        return REFUSED


REFUSED = Refused()


def plain(value):
    """``value`` as nested tuples of plain Python values, arrays and tensors by dtype, shape and
    bytes: two results are the same when their plain forms are equal."""
    if isinstance(value, torch.Tensor):
        if value.layout == torch.sparse_csr:
            return ("csr", plain(value.crow_indices()), plain(value.col_indices()), plain(value.values()),
                    tuple(value.shape))
        return plain(value.detach().numpy())
    if isinstance(value, np.ndarray):  # integers by value: int32 ids read as int64 are the same ids
        if value.dtype.kind in "iu":
            return ("ints", value.shape, np.ascontiguousarray(value, dtype=np.int64).tobytes())
        return ("array", str(value.dtype), value.shape, np.ascontiguousarray(value).tobytes())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), plain(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(plain(v) for v in value))
    if isinstance(value, float):
        return ("float", repr(value))
    if hasattr(value, "__dataclass_fields__"):
        return (type(value).__name__, plain(vars(value)))
    if isinstance(value, MappedFeatures):  # features mapped from a part's file: their values
        return plain(value.tensor)
    if isinstance(value, (str, int, bool, type(None), np.generic)):
        return (type(value).__name__, value if not isinstance(value, np.generic) else value.item())
    raise TypeError(f"no plain form for {type(value).__name__}")


def exact_or_refused(read, original):
    """The property of damage no valid input holds: the original result, or one line."""
    got = outcome(read)
    if got is not REFUSED:
        assert plain(got) == original, "read back silently different"
    return got


def read_or_refused(read):
    """The property of damage that may leave a valid input of other content: it reads, or it
    is refused in one line (never another exception)."""
    return outcome(read)


class Valid(tuple):
    """A valid input and what reading it gives, shown by its name alone."""

    def __new__(cls, path, result):
        return super().__new__(cls, (path, result))

    def __repr__(self) -> str:
        return f"<valid {self[0].name}>"


@contextmanager
def copy_of(source: Path):
    """A fresh copy of ``source`` (a file or a directory) in a temporary directory."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / source.name
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy(source, target)
        yield target


# -- mutations ---------------------------------------------------------------------------------

DEEP = "\0deep\0"  # stands for a value nested 100,000 deep, written as text
NEVER_COUNTS = [-1, -2**63, 10**9, 2**63, 2**64, 10**400, float("nan"), float("inf"), float("-inf"), 1e308, 1.5, "7",
                "x", "", True, False, None, [], {}, [1, 2], {"a": 1}, DEEP]
NEVER_NUMBERS = [-1.0, float("nan"), float("inf"), float("-inf"), 10**400, "1.5", "x", True, None, [], {},
                 {"a": 1}, DEEP]
ANY_VALUE = [0, -1, 2**63, 10**400, float("nan"), float("inf"), 1e308, "x", True, None, [], {}, DEEP]


def dump_json(data, nan=True) -> bytes:
    text = json.dumps(data, allow_nan=nan)
    return text.replace(json.dumps(DEEP), "[" * 100_000 + "]" * 100_000).encode()


def json_paths(data, prefix=()) -> list:
    """Every position in a JSON tree, as a tuple of keys."""
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += json_paths(value, prefix + (key,))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += json_paths(value, prefix + (i,))
    return out


def get_at(data, path):
    for key in path:
        data = data[key]
    return data


def set_at(data, path, value):
    if not path:
        return value
    data = json.loads(json.dumps(data))
    parent = get_at(data, path[:-1])
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return data


DELETE = object()


@st.composite
def json_damage(draw, data, where=lambda path, value: True):
    """(path, new value) for a JSON tree: a value no valid input holds at a position."""
    paths = [p for p in json_paths(data) if where(p, get_at(data, p))]
    path = draw(st.sampled_from(paths))
    old = get_at(data, path)
    if isinstance(old, bool) or old is None or isinstance(old, str):
        choices = [v for v in ANY_VALUE if type(v) is not type(old)]
    elif isinstance(old, int):
        choices = [v for v in NEVER_COUNTS if not (isinstance(v, int) and not isinstance(v, bool) and v >= 0)]
    elif isinstance(old, float):
        choices = NEVER_NUMBERS
    else:  # a container: another shape altogether
        choices = [v for v in ANY_VALUE if type(v) is not type(old)]
    value = draw(st.sampled_from(choices + ([DELETE] if path else [])))
    return path, value


@st.composite
def byte_damage(draw, data: bytes):
    """``data`` truncated, with a byte flipped, or with bytes inserted: never the same bytes."""
    kind = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if kind == "truncate" or not data:
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    at = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        mask = draw(st.integers(1, 255))
        return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]
    return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]


def extreme_array(draw, array: np.ndarray, swaps=()) -> tuple:
    """(what was done, ``array`` with a bad element, the wrong length, dtype or shape, or two ids
    swapped at one of ``swaps``: positions (i, j) whose swap leaves an array no valid input
    holds, two entries of a sorted row say)."""
    kinds = ["value", "dtype", "shape", "length", "empty"] + (["swap"] if len(swaps) else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "value" and array.size and array.dtype.kind in "fiu":
        out = array.copy()
        at = np.unravel_index(draw(st.integers(0, array.size - 1)), array.shape)
        if out.dtype.kind == "f":
            out[at] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        else:
            out[at] = draw(st.sampled_from([-1, np.iinfo(out.dtype).min, np.iinfo(out.dtype).max, 10**9]))
        return kind, out
    if kind == "value":  # booleans hold no bad value: a wrong dtype instead
        kind = "dtype"
    if kind == "swap":
        out = array.copy()
        i, j = draw(st.sampled_from(list(swaps)))
        out[i], out[j] = array[j], array[i]
        return kind, out
    if kind == "dtype":
        target = draw(st.sampled_from([np.float64, np.float16, np.int32, np.uint8, np.bool_, np.complex64, "U3"]))
        if np.dtype(target) == array.dtype:
            target = np.float32 if array.dtype != np.float32 else np.int64
        with np.errstate(all="ignore"):
            return kind, array.astype(target)
    if kind == "shape":
        return kind, (array.reshape(-1)[None, :] if array.ndim == 1 else array.reshape(-1))
    if kind == "length" and array.shape and array.shape[0] > 1:
        cut = draw(st.integers(1, array.shape[0] - 1))
        return kind, (array[:cut] if draw(st.booleans()) else np.concatenate([array, array[:cut]]))
    return "empty", array.reshape(-1)[:0] if array.ndim == 0 else array[:0]


def sorted_swaps(path: Path) -> list:
    """Swaps that unsort what must be sorted: two ids of a row of a CSR block's column ids, two
    of a rank's owned ids (ascending)."""
    array = np.load(path)
    if path.name.endswith(".indices.npy"):
        indptr = np.load(path.with_name(path.name[:-len("indices.npy")] + "indptr.npy"))
        return [(k, k + 1) for row in range(len(indptr) - 1) for k in range(indptr[row], indptr[row + 1] - 1)]
    if path.name == "owned.npy":
        return [(k, k + 1) for k in range(len(array) - 1)]
    return []


# -- the valid inputs, built once -----------------------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    return random_graph(n=30, e=100, features=4, classes=3, weighted=True)


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    return tmp_path_factory.mktemp("valid")


# -- checkpoints ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint_file(graph, valid):
    from gnnmesh.checkpoint import load
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer
    path = valid / "c.pt"
    Trainer(Config.of(epochs=2, hidden=8, checkpoint=str(path)), graph).fit()
    return Valid(path, plain(load(path)))


@fuzz(60, 480, data=st.data())
def test_checkpoint_bytes(checkpoint_file, data):
    from gnnmesh.checkpoint import load
    source, original = checkpoint_file
    with copy_of(source) as path:
        path.write_bytes(data.draw(byte_damage(path.read_bytes())))
        exact_or_refused(lambda: load(path), original)


def _checkpoint_state(path):
    return torch.load(path, weights_only=True)


CHECKED_KEYS = ("version", "epoch", "model", "optimizer", "best", "history", "config", "widths", "job")


@fuzz(50, 320, data=st.data())
def test_checkpoint_fields(checkpoint_file, data):
    """A checked field given a value no checkpoint holds (the fields are what the loader checks)."""
    from gnnmesh.checkpoint import load
    source, original = checkpoint_file
    state = _checkpoint_state(source)
    tree = _jsonable(state)
    # which weights a model has is the trainer's to check against the model, not the loader's
    checked = (lambda p, v: p and p[0] in CHECKED_KEYS and not (len(p) > 1 and p[0] in ("model", "optimizer"))
               and not (p[:2] == ("best", "state") and len(p) > 2))
    path_, value = data.draw(json_damage(tree, checked))
    if value is DEEP:
        value = _nested(200)  # pickle has its own depth limit: as deep as torch writes
    with copy_of(source) as path:
        torch.save(_set_state(state, path_, value), path)
        if checkpoint_legal(path_, value):
            read_or_refused(lambda: load(path))
        else:
            exact_or_refused(lambda: load(path), original)


def _count(value, low=0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


VERSION = 2  # the checkpoint layout the trainer writes


def checkpoint_legal(path, value) -> bool:
    """Whether a checkpoint with ``value`` at ``path`` is one the trainer could have written
    (other numbers, another history): the loader's contract, written out independently."""
    key, rest = path[0], path[1:]
    if value is DELETE:  # without its version, a checkpoint is read as the unversioned layout
        return key in ("version", "config", "history") and len(path) <= 2 or key in ("widths", "job") and rest or \
            key == "history" and rest[1:] not in [("epoch",), ("loss",)] or path == ("best", "state")
    if key == "version":  # the layout written; 1 is the unversioned layout, never written as a number
        return _count(value) and value == VERSION
    if key == "epoch" or rest in [("epoch",)] or key == "history" and rest[1:] == ("epoch",):
        return _count(value)
    if key == "best" and rest in [("val_acc",), ("test_acc",)] or key == "history" and rest[1:] == ("loss",):
        return _a_number(value)
    if key == "widths":
        return value is None if not rest else _count(value, 1)
    if key == "job":  # the id of the elastic job that wrote it, None outside one
        return value is None or isinstance(value, str)
    if path == ("best", "state"):
        return value is None
    return key == "config" and len(path) > 1 or key == "history" and len(path) > 2


def _jsonable(value):
    """The JSON-like skeleton of a checkpoint (tensors as None) for choosing a field."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return None if isinstance(value, torch.Tensor) else value


def _nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def _set_state(state, path, value):
    if len(path) == 1:
        out = dict(state)
        if value is DELETE:
            del out[path[0]]
        else:
            out[path[0]] = value
        return out
    inner = state[path[0]]
    if isinstance(inner, (list, tuple)):
        inner = list(inner)
        if value is DELETE and len(path) == 2:
            del inner[path[1]]
        else:
            inner[path[1]] = _set_state(inner[path[1]], path[2:], value) if len(path) > 2 else value
        return {**state, path[0]: inner}
    return {**state, path[0]: _set_state(inner, path[1:], value)}


# -- parts: open_parts and a rank's arrays, as each strategy reads them -----------------------------

OPERATORS = ("gcn", "mean", "sum", "loop")


class OneOfTwo:
    """The communicator a rank's operator reader asks: rank 0 of 2."""
    rank, world_size = 0, 2


def read_parts(directory):
    """Everything a rank of these parts reads, read the way its strategy reads it (checked)."""
    from gnnmesh.parts import open_parts
    parts = open_parts(directory)
    facts = (parts.kind, parts.parts, parts.num_nodes, parts.num_features, parts.num_classes,
             getattr(parts, "task", None))
    if parts.kind == "partition":
        from gnnmesh.parallel.partition.strategy import _read_rank, read_operator
        part, owned, data = _read_rank(parts, 0)
        operators = []
        for name in OPERATORS:  # what a model asks for, whatever the manifest says
            block, send, recv, entries = read_operator(part, name, OneOfTwo())
            operators.append((name, block.indptr, block.indices, block.values, list(send), recv, entries()))
        return facts, owned, data, operators
    if parts.kind == "tensor":
        part = parts.rank(0)
        n = parts.num_nodes
        values = "adj.values" if part.has("adj.values") else None
        adj = part.adjacency("adj", (n, n), values)
        return facts, adj.indptr, adj.indices, adj.values, part.vertex_data(n, parts.num_features)
    from gnnmesh.layout.grid import roles
    from gnnmesh.parallel.grid3d.blocks import GridBlocks
    from gnnmesh.parallel.grid3d.parts import feature_block
    part = parts.rank(0)
    dims = dict(zip(("x", "y", "z"), (int(g) for g in parts.manifest["grid"])))
    blocks = GridBlocks.from_orders(dims, part.orders("orders", parts.num_nodes))
    me = {"x": 0, "y": 0, "z": 0}
    rows, width = feature_block(parts.manifest, 0)  # the strategy's reading of its block
    data = part.vertex_data(len(blocks.loss_rows(0, 1)), width, x_rows=rows)
    adjs = []
    for k in range(2):  # a model of two layers
        r = roles(k)
        shape = (len(blocks.nodes(k + 1, r.rows, me)), len(blocks.nodes(k, r.cols, me)))
        adj = part.adjacency(f"adj-{k}", shape, f"adj-{k}.values")
        adjs.append((adj.indptr, adj.indices, adj.values))
    return facts, data, adjs


@pytest.fixture(scope="module")
def parts_dirs(graph, valid):
    from gnnmesh.partition import partition
    from gnnmesh.parallel.partition.parts import write_partition_parts
    from gnnmesh.parallel.grid3d.parts import write_grid_parts
    from gnnmesh.parallel.tensor.parts import write_tensor_parts
    out = {}
    out["partition"] = write_partition_parts(graph, partition(graph, 2, "rp", cache=False),
                                             valid / "partition", "random")
    out["tensor"] = write_tensor_parts(graph, 1, valid / "tensor", "random")
    out["grid3d"] = write_grid_parts(graph, {"x": 1, "y": 1, "z": 1}, valid / "grid3d", "random")
    return {kind: Valid(path, plain(read_parts(path))) for kind, path in out.items()}


PART_KINDS = ["partition", "tensor", "grid3d"]


@fuzz(60, 440, kind=st.sampled_from(PART_KINDS), data=st.data())
def test_parts_array_with_its_checksum_recomputed(parts_dirs, kind, data):
    from gnnmesh.parts.store import MANIFEST, checksum
    source, original = parts_dirs[kind]
    with copy_of(source) as where:
        manifest = json.loads((where / MANIFEST).read_text())
        name = data.draw(st.sampled_from(sorted(manifest["ranks"][0]["files"])))
        path = where / "rank-00000" / f"{name}.npy"
        np.save(path, extreme_array(data.draw, np.load(path), sorted_swaps(path))[1], allow_pickle=False)
        manifest["ranks"][0]["files"][name] = checksum(path)
        (where / MANIFEST).write_text(json.dumps(manifest))
        exact_or_refused(lambda: read_parts(where), original)


@fuzz(30, 180, kind=st.sampled_from(PART_KINDS), data=st.data())
def test_parts_file_bytes(parts_dirs, kind, data):
    from gnnmesh.parts.store import MANIFEST
    source, original = parts_dirs[kind]
    with copy_of(source) as where:
        files = sorted(p.relative_to(where) for p in where.rglob("*.npy")) + [Path(MANIFEST)]
        path = where / data.draw(st.sampled_from(files))
        damaged = data.draw(byte_damage(path.read_bytes()))
        path.write_bytes(damaged)
        if path.name == MANIFEST:  # plain text: a flipped digit may be another valid manifest
            read_or_refused(lambda: read_parts(where))
        else:
            exact_or_refused(lambda: read_parts(where), original)


@fuzz(60, 440, kind=st.sampled_from(PART_KINDS), data=st.data())
def test_parts_manifest_fields(parts_dirs, kind, data):
    from gnnmesh.parts.store import MANIFEST
    source, original = parts_dirs[kind]
    with copy_of(source) as where:
        manifest = json.loads((where / MANIFEST).read_text())
        # what no reader reads (descriptions) cannot be wrong
        unread = ("name", "dataset", "how", "fingerprint", "method", "epsilon", "seed", "partition_seconds",
                  "directed", "weighted", "permute", "coords")
        path, value = data.draw(json_damage(manifest, lambda p, v: not set(p) & set(unread)))
        (where / MANIFEST).write_bytes(dump_json(set_at(manifest, path, value)))
        exact_or_refused(lambda: read_parts(where), original)


# -- grid block files and the partition store ------------------------------------------------------------

def read_block_files(directory):
    """The whole merged block, every block alone, and the vertex fields, as ranks read them."""
    from gnnmesh.parallel.grid3d.block_files import open_block_files
    files = open_block_files(directory)
    rows, cols = files.grid
    whole = files.block((0, rows), (0, cols))
    pieces = [files.block(i, j) for i in range(rows) for j in range(cols)]
    return ([(a.indptr, a.indices, a.values, a.shape) for a in [whole, *pieces]],
            files.vertex_data((0, rows)), [files.vertex_data(i) for i in range(rows)])


@pytest.fixture(scope="module")
def block_dir(graph, valid):
    from gnnmesh.parallel.grid3d.block_files import write_block_files
    path = write_block_files(graph, valid / "blocks", (2, 2), seed=1)
    return Valid(path, plain(read_block_files(path)))


@fuzz(50, 300, data=st.data())
def test_block_file_array(block_dir, data):
    source, original = block_dir
    with copy_of(source) as where:
        path = data.draw(st.sampled_from(sorted(where.glob("*.npy"))))
        np.save(path, extreme_array(data.draw, np.load(path), sorted_swaps(path))[1], allow_pickle=False)
        exact_or_refused(lambda: read_block_files(where), original)


@fuzz(30, 180, data=st.data())
def test_block_file_file_bytes(block_dir, data):
    """Block files carry no checksums: damage that leaves a valid array of other values reads as it is."""
    source, _ = block_dir
    with copy_of(source) as where:
        path = data.draw(st.sampled_from(sorted(where.iterdir())))
        path.write_bytes(data.draw(byte_damage(path.read_bytes())))
        read_or_refused(lambda: read_block_files(where))


@fuzz(50, 200, data=st.data())
def test_block_file_manifest_fields(block_dir, data):
    from gnnmesh.parallel.grid3d.block_files import MANIFEST
    source, original = block_dir
    with copy_of(source) as where:
        manifest = json.loads((where / MANIFEST).read_text())
        unread = ("name", "fingerprint", "seed", "swap", "directed")
        path, value = data.draw(json_damage(manifest, lambda p, v: not set(p) & set(unread)))
        (where / MANIFEST).write_bytes(dump_json(set_at(manifest, path, value)))
        if value is DELETE and len(path) == 2 and path[0] == "fields":
            read_or_refused(lambda: read_block_files(where))  # a graph without that field (masks are optional)
        else:
            exact_or_refused(lambda: read_block_files(where), original)


@pytest.fixture(scope="module")
def stored_partition(graph, valid):
    from gnnmesh.partition import partition
    from gnnmesh.partition.store import save_partition
    path = valid / "p.npy"
    assert save_partition(partition(graph, 3, "rp", cache=False), path)
    return Valid(path, plain(read_partition(path, graph)))


def read_partition(path, graph):
    from dataclasses import replace
    from gnnmesh.partition.store import load_partition
    return replace(load_partition(path, graph), path=None)  # where it lies is no part of it


@fuzz(60, 320, data=st.data())
def test_partition_store(graph, stored_partition, data):
    source, original = stored_partition
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / source.name
        shutil.copy(source, path)
        shutil.copy(source.with_suffix(".json"), path.with_suffix(".json"))
        what = data.draw(st.sampled_from(["array", "bytes", "meta"]))
        if what == "array":
            np.save(path, extreme_array(data.draw, np.load(path))[1], allow_pickle=False)
            exact_or_refused(lambda: read_partition(path, graph), original)
        elif what == "bytes":
            victim = data.draw(st.sampled_from([path, path.with_suffix(".json")]))
            victim.write_bytes(data.draw(byte_damage(victim.read_bytes())))
            read_or_refused(lambda: read_partition(path, graph))
        else:
            meta = json.loads(path.with_suffix(".json").read_text())
            field, value = data.draw(json_damage(meta))
            path.with_suffix(".json").write_bytes(dump_json(set_at(meta, field, value)))
            if value is DELETE:  # a field left out takes its default, as for a bare .npy
                read_or_refused(lambda: read_partition(path, graph))
            else:
                exact_or_refused(lambda: read_partition(path, graph), original)


# -- metrics and plan files, as 'gnnmesh report' reads them ----------------------------------------

METRICS = [{"epoch": e, "loss": round(1.0 / e, 4), "train_acc": 0.5, "val_acc": 0.25 * e if e % 2 else None,
            "test_acc": 0.3, "epoch_time": 0.01 * e, "compute_time_min": 0.004, "compute_time_max": 0.006,
            "bytes_total": 1000 * e, "rank_compute_time": [0.1, 0.2], "rank_comm_time": [0.01, None],
            "halo_bytes": 500 * e, "halo_messages": 2, "offload_load_bytes": 100, "strategy": "partition",
            "candidate": "partition-rp", "lr": 0.01} for e in range(1, 5)]
NUMBER_FIELDS = ("loss", "train_acc", "val_acc", "test_acc", "epoch_time", "compute_time_min",
                 "compute_time_max", "bytes_total", "halo_bytes", "offload_load_bytes", "rank_compute_time",
                 "rank_comm_time")


def read_report(metrics, plan):
    """The runs and the plan as ``gnnmesh report`` reads them, and the summary it writes of
    them (drawn from what passed: it must not fail)."""
    import warnings
    from gnnmesh.report import markdown
    from gnnmesh.report.plan_file import read_plan
    from gnnmesh.report.runs import read_runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn last line is dropped with a warning
        runs = read_runs([str(metrics)])
    plan = read_plan(plan)
    markdown.summary(runs, [], plan)
    return [r.records for r in runs], plan.strategy, plan.candidates


@pytest.fixture(scope="module")
def report_inputs(valid):
    from gnnmesh.report.plan_file import Candidate, write_plan
    metrics, plan = valid / "run.jsonl", valid / "plan.json"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in METRICS))
    write_plan(plan, "partition", [Candidate("partition-rp", 0.02, 4096, 2**20, "halo"),
                                   Candidate("tensor", None, None, None, None)])
    return Valid(metrics, plain(read_report(metrics, plan))), plan


def _a_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def metrics_legal(path, value) -> bool:
    """Whether the metrics records with ``value`` at ``path`` are valid records (of other content)."""
    if len(path) < 2:
        return value is DELETE and len(path) == 1  # a run of fewer epochs
    field = path[1]
    if value is DELETE:
        return field != "epoch"
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # NaN and Infinity are null in a metrics file
    if field == "epoch":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if field in NUMBER_FIELDS or field.endswith("_bytes"):
        return value is None or _a_number(value)  # NaN and Infinity: no value
    if field in ("strategy", "candidate"):
        return value is None or isinstance(value, str)
    return True  # fields the report does not read


def plan_legal(path, value) -> bool:
    if value is DELETE:
        return len(path) == 2 and path[0] == "candidates"  # a plan of fewer candidates
    if len(path) < 1:
        return False
    if path == ("strategy",):
        return isinstance(value, str)
    if len(path) != 3:
        return False
    field = path[2]
    if field == "name":
        return isinstance(value, str) and value != "" and value not in ("partition-rp", "tensor")
    if field == "predicted_epoch_s":
        return value is None or (_a_number(value) and value >= 0 and (isinstance(value, int) or math.isfinite(value)))
    if field in ("bytes_per_rank", "peak_memory_bytes"):
        return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
    return value is None or isinstance(value, str)


@fuzz(100, 480, data=st.data())
def test_report_inputs(report_inputs, data):
    (metrics_source, original), plan_source = report_inputs
    with tempfile.TemporaryDirectory() as tmp:
        metrics, plan = Path(tmp) / metrics_source.name, Path(tmp) / plan_source.name
        shutil.copy(metrics_source, metrics)
        shutil.copy(plan_source, plan)
        what = data.draw(st.sampled_from(["metrics field", "plan field", "bytes", "deep"]))
        if what == "metrics field":
            records = [json.loads(line) for line in metrics.read_text().splitlines()]
            path, value = data.draw(json_damage(records))
            changed = set_at(records, path, value)
            metrics.write_bytes(b"".join(dump_json(r) + b"\n" for r in changed) if isinstance(changed, list)
                                else dump_json(changed) + b"\n")
            legal = metrics_legal(path, value)
        elif what == "plan field":
            content = json.loads(plan.read_text())
            path, value = data.draw(json_damage(content))
            plan.write_bytes(dump_json(set_at(content, path, value)))
            legal = plan_legal(path, value)
        elif what == "bytes":
            victim = data.draw(st.sampled_from([metrics, plan]))
            victim.write_bytes(data.draw(byte_damage(victim.read_bytes())))
            legal = True
        else:  # a line, or the plan, nested past any parser's recursion
            victim = data.draw(st.sampled_from([metrics, plan]))
            deep = data.draw(st.sampled_from([b"[" * 100_000, b'{"a":' * 100_000, b"[" * 100_000 + b"]" * 100_000]))
            victim.write_bytes(deep + b"\n" + (victim.read_bytes() if victim == metrics else b""))
            legal = False
        if legal:
            read_or_refused(lambda: read_report(metrics, plan))
        else:
            exact_or_refused(lambda: read_report(metrics, plan), original)


# -- rates files ---------------------------------------------------------------------------------

def rates_legal(path, value) -> bool:
    """Whether the rates file with ``value`` at ``path`` is a valid one (of other rates)."""
    if len(path) != 2:
        return False
    if value is DELETE:
        return True  # a field with a default takes it; one without is refused
    field = path[1]
    if field == "source":
        return isinstance(value, str)
    if not _a_number(value) or isinstance(value, int) and abs(value) > 1e300 or not math.isfinite(value):
        return False
    if field in ("gemm_flops", "intra_bw", "inter_bw", "host_bw", "gather_bw"):
        return value >= 1  # at least one flop or byte a second
    return (1 if field == "crowding" else 0) <= value <= 1e6  # seconds (or a factor) no epoch overflows


def read_rates(path):
    """The rates, and a few prices made with them (what a plan does with what passed)."""
    from gnnmesh.planner.machine import GEMM, SpMM, ring_time
    from gnnmesh.planner.rates import read, sharing_cores
    from gnnmesh.planner.explain import significant
    rates, network = read(path)
    rates.spmm(SpMM(100, 100, 1000, 16)), rates.gemm(GEMM(100, 16, 16)), sharing_cores(rates, 4, 2, 4)
    ring_time("all_reduce", 1e6, 4, network.inter_bw, network.inter_latency)
    big = 2**48  # the largest sizes a plan takes: what passed prices them finitely, as a plan prints them
    seconds = [rates.spmm(SpMM(big, big, big, big)), rates.gemm(GEMM(big, big, big)), rates.overhead(False),
               ring_time("all_reduce", float(big) ** 2, 2**20, network.intra_bw, network.intra_latency)]
    [significant(t) for t in seconds]
    return rates, network


@pytest.fixture(scope="module")
def rates_file(valid):
    from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
    from gnnmesh.planner.rates import write
    path = valid / "rates.json"
    write(path, GPU_RATES, GPU_NETWORK)
    return Valid(path, plain(read_rates(path)))


@fuzz(100, 480, data=st.data())
def test_rates_file(rates_file, data):
    source, original = rates_file
    with copy_of(source) as path:
        content = json.loads(path.read_text())
        if data.draw(st.booleans()):
            field, value = data.draw(json_damage(content))
            # and 0, which no divisor may be, and finite extremes that price an epoch at infinity
            choice = data.draw(st.sampled_from([value, 0, 0.0, 1e308, 1e300, 1e-300, 5e-324, 1e7]))
            value = choice if len(field) == 2 else value
            path.write_bytes(dump_json(set_at(content, field, value)))
            legal = rates_legal(field, value)
        else:
            path.write_bytes(data.draw(byte_damage(path.read_bytes())))
            legal = True
        if legal:
            read_or_refused(lambda: read_rates(path))
        else:
            assert exact_or_refused(lambda: read_rates(path), original) is REFUSED


def test_rates_refusals_name_the_file_and_field(tmp_path):
    """The known cases, each refused in one line naming the file and the field."""
    from gnnmesh.planner.machine import GPU_NETWORK, GPU_RATES
    from gnnmesh.planner.rates import read, write
    path = tmp_path / "rates.json"
    for table, field, value in [("compute", "gemm_flops", 0), ("compute", "spmm_call", -1e-6),
                                ("network", "intra_bw", float("nan")), ("network", "inter_bw", float("inf")),
                                ("compute", "spmm_per_nnz", "5e-12"), ("compute", "gemm_call", True),
                                ("network", "host_bw", {"a": 1}), ("compute", "crowding", 0)]:
        write(path, GPU_RATES, GPU_NETWORK)
        content = json.loads(path.read_text())
        content[table][field] = value
        path.write_text(json.dumps(content))
        with pytest.raises(ConfigError) as info:
            read(path)
        text = str(info.value)
        assert str(path) in text and f"'{table}.{field}'" in text and "\n" not in text, text


# -- prediction directories -------------------------------------------------------------------------

def read_prediction(directory):
    from gnnmesh.predict.store import read
    got = read(directory)
    return got.ids, got.values


@pytest.fixture(scope="module")
def prediction_dir(valid):
    from gnnmesh.predict.store import KIND, MANIFEST, VERSION
    where = valid / "prediction"
    where.mkdir()
    rng = np.random.default_rng(0)
    shards = []
    for rank, ids in enumerate([np.arange(0, 30, 2), np.arange(1, 30, 2)]):
        np.save(where / f"ids-{rank:05d}.npy", ids.astype(np.int64))
        np.save(where / f"values-{rank:05d}.npy", rng.standard_normal((len(ids), 3)).astype(np.float32))
        shards.append({"rank": rank, "rows": len(ids), "ids": f"ids-{rank:05d}.npy",
                       "values": f"values-{rank:05d}.npy"})
    manifest = {"kind": KIND, "version": VERSION, "format": "npy", "checkpoint": "c.pt",
                "graph": {"nodes": 30, "key": "abc"}, "rows": 30, "width": 3, "dtype": "float32", "shards": shards}
    (where / MANIFEST).write_text(json.dumps(manifest))
    return Valid(where, plain(read_prediction(where)))


@fuzz(60, 360, data=st.data())
def test_prediction_directory(prediction_dir, data):
    from gnnmesh.predict.store import MANIFEST
    source, original = prediction_dir
    with copy_of(source) as where:
        what = data.draw(st.sampled_from(["array", "bytes", "manifest"]))
        if what == "array":
            path = data.draw(st.sampled_from(sorted(where.glob("*.npy"))))
            kind, array = extreme_array(data.draw, np.load(path))
            np.save(path, array, allow_pickle=False)
            legal = path.name.startswith("values") and kind == "value"  # predictions may be anything finite or not
        elif what == "bytes":
            path = data.draw(st.sampled_from(sorted(where.iterdir())))
            path.write_bytes(data.draw(byte_damage(path.read_bytes())))
            legal = True
        else:
            manifest = json.loads((where / MANIFEST).read_text())
            path, value = data.draw(json_damage(manifest))
            (where / MANIFEST).write_bytes(dump_json(set_at(manifest, path, value)))
            legal = path[:1] == ("checkpoint",) or path[:2] == ("graph", "key") or path[-1:] == ("rank",) \
                or (path == ("graph", "nodes") and isinstance(value, int) and value >= 30)
        if legal:
            read_or_refused(lambda: read_prediction(where))
        else:
            exact_or_refused(lambda: read_prediction(where), original)


# -- dataset files: OGB directories, edge lists, MatrixMarket, .npz ---------------------------------

def graph_result(graph):
    """What a loaded graph holds (its meta names the file, which differs between copies)."""
    return (graph.num_nodes, graph.directed, graph.num_classes, graph.adj.indptr, graph.adj.indices,
            graph.adj.values, graph.x, graph.y, graph.train_mask, graph.val_mask, graph.test_mask)


def load_dataset(path):
    from gnnmesh.datasets.described import load_described
    from gnnmesh.datasets.files import load_file
    from gnnmesh.datasets.ogb import load_ogb
    if (path / DESCRIPTION).is_file():
        return graph_result(load_described(path / DESCRIPTION))
    return graph_result(load_ogb(path) if path.is_dir() else load_file(path))


DESCRIPTION = "graph.toml"


@pytest.fixture(scope="module")
def dataset_files(graph, valid):
    import scipy.sparse as sp
    coo = graph.adj.to_scipy().tocoo()
    src, dst, w = coo.col, coo.row, coo.data  # rows are destinations
    n = graph.num_nodes
    out = {}
    out["edgelist"] = valid / "g.txt"
    out["edgelist"].write_text("# src dst weight\n" + "".join(f"{s} {d} {x:.6f}\n" for s, d, x in zip(src, dst, w)))
    out["mtx"] = valid / "g.mtx"
    out["mtx"].write_text(f"%%MatrixMarket matrix coordinate real general\n% a comment\n{n} {n} {len(src)}\n"
                          + "".join(f"{s + 1} {d + 1} {x:.6f}\n" for s, d, x in zip(src, dst, w)))
    out["npz"] = valid / "g.npz"
    adj = sp.csr_matrix((w.astype(np.float32), (src, dst)), shape=(n, n))
    adj.sort_indices()
    np.savez(out["npz"], adj_data=adj.data, adj_indices=adj.indices.astype(np.int64),
             adj_indptr=adj.indptr.astype(np.int64), adj_shape=np.array(adj.shape), attr_matrix=graph.x.numpy(),
             labels=graph.y.numpy(), train_mask=graph.train_mask.numpy(), val_mask=graph.val_mask.numpy(),
             test_mask=graph.test_mask.numpy(), num_classes=np.array(graph.num_classes))
    root = valid / "ogb"
    (root / "raw").mkdir(parents=True)
    (root / "split" / "s").mkdir(parents=True)
    (root / "raw" / "edge.csv.gz").write_bytes(gzip.compress("".join(f"{s},{d}\n" for s, d in zip(src, dst)).encode(),
                                                             mtime=0))
    (root / "raw" / "num-node-list.csv").write_text(f"{n}\n")
    (root / "raw" / "num-edge-list.csv").write_text(f"{len(src)}\n")
    (root / "raw" / "node-label.csv").write_text("".join(f"{int(y)}\n" for y in graph.y))
    (root / "raw" / "node-feat.csv").write_text("".join(",".join(f"{v:.5f}" for v in row) + "\n"
                                                        for row in graph.x.tolist()))
    for name, mask in (("train", graph.train_mask), ("valid", graph.val_mask), ("test", graph.test_mask)):
        (root / "split" / "s" / f"{name}.csv").write_text("".join(f"{int(i)}\n" for i in torch.nonzero(mask)[:, 0]))
    out["ogb"] = root
    out["described"] = _described(valid / "described", graph, src, dst, w)
    if "parquet" in DESCRIBED:
        out["parquet"] = _parquet_described(valid / "parquet", graph, src, dst, w)
    return {kind: Valid(path, plain(load_dataset(path))) for kind, path in out.items()}


def _described(root: Path, graph, src, dst, w) -> Path:
    """A TOML description of the graph's own files: CSV edges, .npy features, text labels and split."""
    root.mkdir()
    (root / "edges.csv").write_text("from,to,w\n" + "".join(f"{s},{d},{x:.6f}\n" for s, d, x in zip(src, dst, w)))
    np.save(root / "x.npy", graph.x.numpy())
    (root / "labels.txt").write_text("".join(f"{int(y)}\n" for y in graph.y))
    for name, mask in (("train", graph.train_mask), ("val", graph.val_mask), ("test", graph.test_mask)):
        (root / f"{name}.txt").write_text("".join(f"{int(i)}\n" for i in torch.nonzero(mask)[:, 0]))
    (root / DESCRIPTION).write_text(
        f'name = "g"\nnum_nodes = {graph.num_nodes}\ndirected = true\n[edges]\nfile = "edges.csv"\nsource = "from"\ntarget = 1\nweight = "w"\nheader = true\n'
        '[features]\nfile = "x.npy"\n[labels]\nfile = "labels.txt"\n'
        '[split]\ntrain = "train.txt"\nval = "val.txt"\ntest = "test.txt"\n')
    return root


def _parquet_described(root: Path, graph, src, dst, w) -> Path:
    """A description of Parquet edges and features (pyarrow: the parquet extra, in the dev extra)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    root.mkdir()
    pq.write_table(pa.table({"s": src.astype(np.int64), "d": dst.astype(np.int64), "w": w}), root / "edges.parquet")
    x = graph.x.numpy()
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(x.shape[1])}), root / "x.parquet")
    (root / DESCRIPTION).write_text('[edges]\nfile = "edges.parquet"\nsource = "s"\ntarget = "d"\nweight = 2\n'
                                    '[features]\nfile = "x.parquet"\n')
    return root


TEXT_DATASETS = ["edgelist", "mtx", "ogb"]
DESCRIBED = ["described"] + (["parquet"] if importlib.util.find_spec("pyarrow") else [])
# in place of an integer (an id, a count, a label): never one
NOT_INTEGERS = [b"-1", b"9223372036854775808", b"-9223372036854775809", b"99999999999999999999999", b"1e308",
                b"1.5", b"nan", b"inf", b"x", b"0x1f", b"", b"\x00", b"[[[[[[[["]
# in place of a weight or a feature: never one
NOT_NUMBERS = [b"nan", b"inf", b"-inf", b"1e999", b"-1e999", b"x", b"0x1f", b"", b"\x00", b"{}"]


def text_files(where: Path) -> list:
    return [where] if where.is_file() else sorted(p for p in where.rglob("*") if p.is_file())


def read_text(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def write_text(path: Path, data: bytes) -> None:
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


@fuzz(100, 600, kind=st.sampled_from(TEXT_DATASETS), data=st.data())
def test_dataset_text_number(dataset_files, kind, data):
    """A number of a dataset's text files replaced by something no valid file holds there."""
    import re
    source, original = dataset_files[kind]
    with copy_of(source) as where:
        path = data.draw(st.sampled_from(text_files(where)))
        text = read_text(path)
        tokens = [m for m in re.finditer(rb"[^\s,]+", text)
                  if not text[:m.start()].rsplit(b"\n", 1)[-1].lstrip().startswith((b"%", b"#"))]
        token = data.draw(st.sampled_from(tokens))
        integer = b"." not in token.group()
        if kind == "mtx" and not integer and len(text[:token.start()].rsplit(b"\n", 1)[-1].split()) < 2:
            integer = True
        line = text[:token.end()].rsplit(b"\n", 1)[-1] + text[token.end():].split(b"\n", 1)[0]
        alone = len(re.findall(rb"[^\s,]+", line)) == 1  # removed, it leaves a blank line, which is none
        new = data.draw(st.sampled_from([t for t in (NOT_INTEGERS if integer else NOT_NUMBERS) if t or not alone]))
        write_text(path, text[:token.start()] + new + text[token.end():])
        exact_or_refused(lambda: load_dataset(where), original)


@fuzz(80, 440, kind=st.sampled_from(TEXT_DATASETS + ["npz"] + DESCRIBED), data=st.data())
def test_dataset_bytes(dataset_files, kind, data):
    """Bytes damaged anywhere (a gzip file's compressed bytes included): a text file carries no
    checksum, so a flipped digit is another valid file, read as it is; all else is one line."""
    source, _ = dataset_files[kind]
    with copy_of(source) as where:
        path = data.draw(st.sampled_from(text_files(where)))
        if path.suffix == ".gz" and data.draw(st.booleans()):
            write_text(path, data.draw(byte_damage(read_text(path))))
        else:
            path.write_bytes(data.draw(byte_damage(path.read_bytes())))
        read_or_refused(lambda: load_dataset(where))


TOML_VALUES = ['0', '-1', '1.5', 'nan', '"x"', '""', '"absent.csv"', 'true', '[]', '{}', '[1, "a"]', '"../g.toml"']


@fuzz(60, 320, data=st.data())
def test_description_fields(dataset_files, data):
    """A field of a dataset description set to another value or type, or deleted: it reads
    (another valid description: columns swapped, another file) or is refused in one line."""
    import re
    source, _ = dataset_files["described"]
    with copy_of(source) as where:
        path = where / DESCRIPTION
        lines = path.read_text().splitlines()
        at = data.draw(st.sampled_from([i for i, line in enumerate(lines) if re.match(r"\w+ = ", line)]))
        value = data.draw(st.sampled_from(TOML_VALUES + [None]))
        key = lines[at].split(" = ")[0]
        lines[at] = "" if value is None else f"{key} = {value}"
        path.write_text("\n".join(lines) + "\n")
        read_or_refused(lambda: load_dataset(where))


# any finite weights and features, any class ids and class count they fit in, are valid
NPZ_VALUES = ("adj_data", "attr_matrix", "labels", "num_classes")


@fuzz(60, 360, data=st.data())
def test_npz_field(dataset_files, data):
    source, original = dataset_files["npz"]
    with copy_of(source) as path:
        with np.load(path) as z:
            arrays = dict(z)
        name = data.draw(st.sampled_from(sorted(arrays)))
        kind, arrays[name] = extreme_array(data.draw, arrays[name])  # (a CSR's rows need not be sorted)
        np.savez(path, **arrays)
        if name in NPZ_VALUES and kind in ("dtype", "value") and not (kind == "value" and name in NPZ_VALUES[:2]):
            read_or_refused(lambda: load_dataset(path))
        else:
            exact_or_refused(lambda: load_dataset(path), original)


# -- PyG export directories ------------------------------------------------------------------------

EXPORT_MODELS = ("gat", "decoupled-gat", "gin")  # every layer type and argument an export writes


def read_export(where):
    """The model ``load_pyg`` builds, by its weights (what it holds beyond them is model.json's)."""
    from gnnmesh.export import load_pyg
    return load_pyg(where).state_dict()


@pytest.fixture(scope="module")
def export_dirs(graph, valid):
    pytest.importorskip("torch_geometric")
    from gnnmesh.config import Config
    from gnnmesh.export import export_pyg
    from gnnmesh.train import Trainer
    from tests.helpers import model_fields, taken
    out = {}
    for name in EXPORT_MODELS:
        checkpoint = valid / f"export-{name}.pt"
        fields = model_fields(name)
        Trainer(Config.of(**fields, **taken(fields, hidden=4, heads=2), epochs=1, checkpoint=str(checkpoint)), graph).fit()
        out[name] = export_pyg(checkpoint, valid / f"export-{name}") and valid / f"export-{name}"
    return {name: Valid(path, plain(read_export(path))) for name, path in out.items()}


@fuzz(60, 360, model=st.sampled_from(EXPORT_MODELS), data=st.data())
def test_export_directory(export_dirs, model, data):
    """model.json given a value no export writes (sizes of 2^63, heads of -1, nesting) or damaged
    bytes, weights.pt damaged: the same model, or one line; never an allocation or torch's error."""
    from gnnmesh.export import MODEL_FILE, WEIGHTS_FILE
    source, original = export_dirs[model]
    with copy_of(source) as where:
        what = data.draw(st.sampled_from(["field", "bytes", "weights"]))
        if what == "field":
            spec = json.loads((where / MODEL_FILE).read_text())
            path, value = data.draw(json_damage(spec))
            (where / MODEL_FILE).write_bytes(dump_json(set_at(spec, path, value)))
            exact_or_refused(lambda: read_export(where), original)
        else:
            victim = where / (MODEL_FILE if what == "bytes" else WEIGHTS_FILE)
            victim.write_bytes(data.draw(byte_damage(victim.read_bytes())))
            (read_or_refused if what == "bytes" else exact_or_refused)(
                *((lambda: read_export(where),) if what == "bytes" else (lambda: read_export(where), original)))


# -- shard sets (gnnmesh.datasets.sharded): meta.json ------------------------------------------------

def read_shard_set(directory):
    from gnnmesh.datasets.sharded import open_shards
    return graph_result(open_shards(directory).graph())


@pytest.fixture(scope="module")
def shard_set(valid):
    from gnnmesh.datasets.sharding import write_shards
    path = valid / "shard-set"
    write_shards("sbm:nodes=40,classes=3,features=3", path, 2)
    return Valid(path, plain(read_shard_set(path)))


@fuzz(60, 360, data=st.data())
def test_shard_set_meta(shard_set, data):
    """A field of meta.json given a value no set holds (a class count of 10^9, nesting 100,000
    deep, ...), or its bytes damaged: the same graph, or one line naming meta.json."""
    from gnnmesh.datasets.sharded import META
    source, original = shard_set
    with copy_of(source) as where:
        meta = json.loads((where / META).read_text())
        if data.draw(st.booleans()):
            # descriptions no reader checks against the files (where the graph came from)
            path, value = data.draw(json_damage(meta, lambda p, v: p[:1] not in (("source",), ("meta",))))
            (where / META).write_bytes(dump_json(set_at(meta, path, value)))
            exact_or_refused(lambda: read_shard_set(where), original)
        else:
            (where / META).write_bytes(data.draw(byte_damage((where / META).read_bytes())))
            read_or_refused(lambda: read_shard_set(where))


# -- config files (--config) --------------------------------------------------------------------------

NOT_SETTINGS = [b"-1", b"1e400", b"-1e400", b"nan", b"inf", b"99999999999999999999999", b"1.5", b"true", b'"x"',
                b"[]", b"{}", b"[1, [2]]", b"{a = 1}", b"", b"[" * 100_000 + b"]" * 100_000]


def read_config(path):
    """The config ``--config`` gives, and its TOML form (what --print-config writes)."""
    import warnings
    from gnnmesh.config import Config
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flat form's deprecation
        config = Config.from_toml(path)
    return config.to_toml()


@pytest.fixture(scope="module")
def config_file(valid):
    from gnnmesh.config import Config
    path = valid / "config.toml"
    path.write_text(Config.of(model="gat", epochs=7, lr=0.02, heads=2, nproc=2, strategy="partition",
                              seed=3).to_toml())
    return Valid(path, plain(read_config(path)))


@fuzz(80, 400, data=st.data())
def test_config_file(config_file, data):
    """A setting's value replaced (by a number out of range, another type, nesting 100,000 deep),
    a table nested deeply, or bytes damaged: a config (of other settings, where the value is
    valid), or one line naming the file; never a RecursionError or another exception."""
    import re
    source, _ = config_file
    with copy_of(source) as path:
        text = path.read_bytes()
        what = data.draw(st.sampled_from(["value", "table", "bytes"]))
        if what == "value":
            values = list(re.finditer(rb"^[a-z_]+ = (.*)$", text, re.M))
            at = data.draw(st.sampled_from(values))
            new = data.draw(st.sampled_from(NOT_SETTINGS))
            path.write_bytes(text[:at.start(1)] + new + text[at.end(1):])
            deep = new.startswith(b"[[")
        elif what == "table":
            depth = data.draw(st.sampled_from([200, 5000]))
            path.write_bytes(text + b"\n[" + b".".join([b"t"] * depth) + b"]\nx = 1\n")
            deep = True
        else:
            path.write_bytes(data.draw(byte_damage(text)))
            deep = False
        got = read_or_refused(lambda: read_config(path))
        assert not deep or got is REFUSED


# -- the cases found, each once ----------------------------------------------------------------------

def _nest(path: Path) -> None:
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")


def _block_array(name: str, change):
    def damage(where: Path) -> None:
        path = where / name
        np.save(path, change(np.load(path)), allow_pickle=False)
    return damage


def _unsort(indices):
    out = indices.copy()
    out[0], out[1] = indices[1], indices[0]
    return out


def _nan_first(values):
    out = values.copy()
    out[0] = np.nan
    return out


@pytest.mark.parametrize("what, damage, message", [
    ("report", lambda metrics, plan: _nest(metrics), "run.jsonl line 1: not a JSON metrics record (nested too deeply)"),
    ("report", lambda metrics, plan: _nest(plan), "plan.json: not a plan file (JSON nested too deeply)"),
    ("block files", _block_array("adj-0-0.indices.npy", _unsort), "adj-0-0: field 'indices' is not sorted"),
    ("block files", _block_array("adj-0-0.values.npy", _nan_first), "adj-0-0.values.npy: corrupt block file: a non-finite"),
    ("block files", _block_array("y-0.npy", lambda y: y + 5), "field 'y' has label"),
    ("partition", lambda path: path.with_suffix(".json").write_text('{"parts": NaN}'),
     "p.json: unreadable partition description (field 'parts' must be a count of parts >= 1, got nan)"),
])
def test_known_cases_are_one_line(report_inputs, block_dir, stored_partition, graph, what, damage, message):
    """What the fuzzer found, as plain examples: each is refused in one line naming the file."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if what == "report":
            (metrics_source, _), plan_source = report_inputs
            metrics, plan = shutil.copy(metrics_source, tmp), shutil.copy(plan_source, tmp)
            damage(Path(metrics), Path(plan))
            read = lambda: read_report(metrics, plan)  # noqa: E731
        elif what == "block files":
            where = Path(shutil.copytree(block_dir[0], tmp / "blocks"))
            damage(where)
            read = lambda: read_block_files(where)  # noqa: E731
        else:
            path = Path(shutil.copy(stored_partition[0], tmp))
            shutil.copy(stored_partition[0].with_suffix(".json"), tmp)
            damage(path)
            read = lambda: read_partition(path, graph)  # noqa: E731
        with pytest.raises((ConfigError, GraphError)) as info:
            read()
        assert message in str(info.value) and "\n" not in str(info.value), str(info.value)
