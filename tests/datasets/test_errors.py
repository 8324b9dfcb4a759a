"""Bad input to gnnmesh.datasets: every case raises GraphError naming the file and line
(text files) or the field (npz, options)."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from gnnmesh import GraphError
from gnnmesh.datasets import _io, load


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def fails(path_or_name, pattern, **options):
    with pytest.raises(GraphError, match=pattern) as info:
        load(path_or_name, **options)
    return str(info.value)


# -- edge lists: file and line -------------------------------------------------------------

EDGES = "# header comment\n0 1\n1 2\n2 3\n3 4\n4 5\n{bad}\n6 7\n"


@pytest.mark.parametrize("bad,message", [
    ("3.5 6", "edges.txt line 7: non-integer node id '3.5'"),
    ("5 six", "edges.txt line 7: non-integer node id 'six'"),
    ("5 nan", "edges.txt line 7: non-integer node id 'nan'"),
    ("-3 6", "edges.txt line 7: negative node id -3"),
    ("5 6 7 8", "edges.txt line 7: expected 2 columns \\(as on line 2\\), got 4"),
    ("5", "edges.txt line 7: expected 2 columns \\(as on line 2\\), got 1"),
])
def test_bad_edge_list_lines(tmp_path, bad, message):
    path = write(tmp_path, "edges.txt", EDGES.format(bad=bad))
    fails(path, message)


def test_first_bad_line_is_reported(tmp_path):
    path = write(tmp_path, "edges.txt", "0 1\n1 -5\n-2 3\n")
    fails(path, "edges.txt line 2: negative node id -5")


def test_bad_weight(tmp_path):
    path = write(tmp_path, "w.el", "0 1 1.0\n1 2 inf\n")
    fails(path, "w.el line 2: non-finite weight 'inf'")
    path = write(tmp_path, "w2.el", "0 1 1.0\n1 2 heavy\n")
    fails(path, "w2.el line 2: weight 'heavy' is not a number")


def test_out_of_range_with_declared_node_count(tmp_path):
    path = write(tmp_path, "edges.txt", "0 1\n1 9\n")
    fails(path, r"edges.txt line 2: node id 9 out of range for 5 nodes", num_nodes=5)


def test_one_based_file_with_zero(tmp_path):
    path = write(tmp_path, "edges.txt", "1 2\n0 2\n")
    fails(path, r"edges.txt line 2: node id 0 is invalid: ids start at 1", index_base=1)


def test_header_only_allowed_in_csv(tmp_path):
    fails(write(tmp_path, "e.txt", "src dst\n0 1\n"), "e.txt line 1: non-integer node id 'src'")
    assert load(write(tmp_path, "e.csv", "src,dst\n0,1\n"), cache=False).num_edges == 1
    fails(write(tmp_path, "h.csv", "a,b\n0,1\nc,d\n"), "h.csv line 3: non-integer node id 'c'")


def test_crlf_and_gzip_line_numbers(tmp_path):
    path = tmp_path / "edges.txt.gz"
    path.write_bytes(gzip.compress(b"#c\r\n0\t1\r\n1\t2.5\r\n"))
    fails(path, r"edges.txt.gz line 3: non-integer node id '2.5'")


# -- empty graphs ------------------------------------------------------------------------

def test_file_with_only_comments(tmp_path):
    fails(write(tmp_path, "empty.txt", "# nothing\n% here\n\n"), "empty.txt: no edges")
    fails(write(tmp_path, "blank.csv", "src,dst\n"), "blank.csv: no edges")
    fails(write(tmp_path, "zero.txt", b""), "zero.txt: no edges")


def test_empty_mtx(tmp_path):
    path = write(tmp_path, "e.mtx", "%%MatrixMarket matrix coordinate pattern general\n0 0 0\n")
    fails(path, "e.mtx: the graph is empty")


# -- unreadable files ----------------------------------------------------------------------

def test_file_not_found(tmp_path):
    fails(tmp_path / "missing.txt", "missing.txt: file not found")
    fails(str(tmp_path / "nope" / "g.mtx"), "g.mtx: file not found")


def test_directory_instead_of_file(tmp_path):
    (tmp_path / "dir.txt").mkdir()
    fails(tmp_path / "dir.txt", "dir.txt: is a directory")


def test_permission_denied(tmp_path, monkeypatch):
    path = write(tmp_path, "secret.txt", "0 1\n")
    if os.geteuid() != 0:
        path.chmod(0)
    else:  # root reads anything: simulate the OS refusing
        def deny(*args, **kwargs):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(_io, "open", deny, raising=False)
    try:
        fails(path, "secret.txt: permission denied")
    finally:
        path.chmod(0o644)


def test_truncated_gzip(tmp_path):
    data = gzip.compress(b"0 1\n" * 10000)
    fails(write(tmp_path, "t.txt.gz", data[: len(data) // 2]), "t.txt.gz: truncated gzip")
    fails(write(tmp_path, "fake.txt.gz", b"0 1\n"), "fake.txt.gz: not gzip data")


def test_truncated_npz(tmp_path):
    path = write_npz(tmp_path / "g.npz")
    data = path.read_bytes()
    fails(write(tmp_path, "t.npz", data[: len(data) // 2]), "t.npz: truncated or corrupt")


def test_mtx_fewer_entries_than_declared(tmp_path):
    path = write(tmp_path, "short.mtx",
                 "%%MatrixMarket matrix coordinate pattern general\n4 4 3\n1 2\n2 3\n")
    fails(path, "short.mtx: truncated: line 2 declares 3 entries, found 2")


def test_truncated_zip_member(tmp_path):
    folder = tmp_path / "root" / "github_musae"
    folder.mkdir(parents=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for part in ("edges.csv", "target.csv", "features.json"):
            zf.writestr(f"git_web_ml/musae_git_{part}", "x" * 5000)
    data = buf.getvalue()
    (folder / "git_web_ml.zip").write_bytes(data[: len(data) // 2])
    fails("github", "git_web_ml.zip.*corrupt or truncated zip", root=tmp_path / "root")


# -- MatrixMarket -------------------------------------------------------------------------

MTX = "%%MatrixMarket matrix coordinate real general\n% c\n3 3 3\n1 2 1.0\n{bad}\n3 1 1.0\n"


@pytest.mark.parametrize("bad,message", [
    ("4 1 1.0", r"m.mtx line 5: row index 4 out of range for 3 nodes"),
    ("1 0 1.0", r"m.mtx line 5: column index 0 is invalid: ids start at 1"),
    ("-1 2 1.0", r"m.mtx line 5: negative row index -1"),
    ("1.5 2 1.0", r"m.mtx line 5: non-integer row index '1.5'"),
    ("1 2 nan", r"m.mtx line 5: non-finite value 'nan'"),
    ("1 2", r"m.mtx line 5: expected 3 columns \(as on line 4\), got 2"),
])
def test_bad_mtx_entries(tmp_path, bad, message):
    fails(write(tmp_path, "m.mtx", MTX.format(bad=bad)), message)


def test_bad_mtx_headers(tmp_path):
    banner = "%%MatrixMarket matrix coordinate"
    fails(write(tmp_path, "a.mtx", f"{banner} complex general\n1 1 1\n1 1 1 0\n"),
          "a.mtx line 1: unsupported MatrixMarket field")
    fails(write(tmp_path, "b.mtx", f"{banner} real general\n3 4 1\n1 1 1\n"),
          "b.mtx line 2: matrix is 3 x 4")
    fails(write(tmp_path, "c.mtx", f"{banner} real general\n3 x 1\n"),
          "c.mtx line 2: expected the size line")
    fails(write(tmp_path, "d.mtx", f"{banner} real general\n2 2 1\n1 1 1\n2 2 1\n"),
          "d.mtx line 4: more entries than the 1 declared on line 2")
    fails(write(tmp_path, "e.mtx", f"{banner} real general\n% only\n"),
          "e.mtx: truncated: no size line")


# -- npz fields ----------------------------------------------------------------------------

def write_npz(path, n=5, **extra):
    adj = sp.csr_matrix(np.eye(n, k=1, dtype=np.float32))
    attr = sp.csr_matrix(np.ones((n, 3), dtype=np.float32))
    arrays = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
                  adj_shape=np.array(adj.shape), attr_data=attr.data, attr_indices=attr.indices,
                  attr_indptr=attr.indptr, attr_shape=np.array(attr.shape),
                  labels=np.arange(n) % 2)
    arrays.update(extra)
    np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


def test_npz_feature_length_mismatch(tmp_path):
    attr = sp.csr_matrix(np.ones((4, 3), dtype=np.float32))
    path = write_npz(tmp_path / "g.npz", attr_data=attr.data, attr_indices=attr.indices,
                     attr_indptr=attr.indptr, attr_shape=np.array(attr.shape))
    fails(path, r"g.npz: field 'attr_shape' has 4 rows, expected 5")
    path = write_npz(tmp_path / "h.npz", attr_data=None, attr_indices=None, attr_indptr=None,
                     attr_shape=None, attr_matrix=np.ones((6, 2)))
    fails(path, r"h.npz: field 'attr_matrix' has 6 rows, expected 5")


def test_npz_label_and_mask_length_mismatch(tmp_path):
    fails(write_npz(tmp_path / "l.npz", labels=np.zeros(4, int)),
          r"l.npz: field 'labels' has shape \[4\], expected \[5\]")
    fails(write_npz(tmp_path / "m.npz", train_mask=np.ones(3, bool)),
          r"m.npz: field 'train_mask' has shape \[3\], expected \[5\]")


def test_npz_nan_and_inf_features(tmp_path):
    x = np.ones((5, 2), np.float32)
    x[3, 1] = np.nan
    kw = dict(attr_data=None, attr_indices=None, attr_indptr=None, attr_shape=None)
    fails(write_npz(tmp_path / "n.npz", attr_matrix=x, **kw),
          r"n.npz: field 'x' has a non-finite value nan at node 3, feature 1")
    x[3, 1] = np.inf
    fails(write_npz(tmp_path / "i.npz", attr_matrix=x, **kw),
          r"i.npz: field 'x' .*non-finite value inf")


def test_npz_labels_out_of_range(tmp_path):
    fails(write_npz(tmp_path / "r.npz", labels=np.array([0, 1, 2, 5, 1]), num_classes=np.array(3)),
          r"r.npz: field 'y' has label 5 at node 3, out of range for 3 classes")
    fails(write_npz(tmp_path / "neg.npz", labels=np.array([0, 1, -1, 1, 1])),
          r"neg.npz: field 'labels' has a negative label -1 at node 2")
    fails(write_npz(tmp_path / "f.npz", labels=np.array([0, 1, 0.5, 1, 1])),
          r"f.npz: field 'labels' must hold integer class ids")


def test_npz_overlapping_masks(tmp_path):
    train = np.array([1, 1, 0, 0, 0], bool)
    val = np.array([0, 1, 1, 0, 0], bool)
    fails(write_npz(tmp_path / "o.npz", train_mask=train, val_mask=val),
          r"o.npz: fields 'train_mask' and 'val_mask' overlap \(1 nodes, first 1\)")


def test_npz_missing_or_broken_adjacency(tmp_path):
    np.savez(tmp_path / "x.npz", labels=np.zeros(3, int))
    fails(tmp_path / "x.npz", r"x.npz: missing adjacency fields")
    fails(write_npz(tmp_path / "b.npz", adj_indptr=np.array([0, 1, 9, 9, 9, 9])),
          r"b.npz: field 'adj_indptr' must run from 0 to 4")


def test_npz_object_arrays_are_ignored(tmp_path):
    path = tmp_path / "names.npz"
    write_npz(path, node_names=np.array(["a", "b", "c", "d", None], dtype=object))
    assert load(path, cache=False).num_nodes == 5


# -- datasets, names, options ----------------------------------------------------------------

def test_unknown_dataset_lists_known_names():
    message = fails("coraa", r"unknown dataset 'coraa'; known datasets: cora, citeseer")
    assert "rmat" in message and "sbm" in message and "twitch-de" in message


def test_dataset_needs_a_root(monkeypatch):
    monkeypatch.delenv("GNNMESH_DATA", raising=False)
    fails("karate", r"dataset 'karate' needs its data files: pass --data-root .* or set "
                    r"GNNMESH_DATA; to download them: gnnmesh datasets --fetch karate")


def test_dataset_files_missing(tmp_path):
    fails("karate", r"dataset 'karate': missing under .*: gunduzvd_mtx/karate.mtx; to download "
                    r"them: gnnmesh datasets --fetch karate", root=tmp_path)
    fails("karate", r"data root .* is not a directory", root=tmp_path / "nope")


def test_unknown_option_lists_valid_ones(tmp_path):
    message = fails("sbm", r"sbm: unknown option 'nodez'; valid options: ", nodez=3)
    assert all(k in message for k in ("nodes", "classes", "avg_degree", "seed", "cache"))
    fails(write(tmp_path, "e.txt", "0 1\n"), r"e.txt: unknown option 'normalize_features'",
          normalize_features=True)
    fails("rmat", r"option 'features' expects int, got 'many'", features="many")
    fails("sbm", r"option 'train_frac' must be in \[0, 1\]", train_frac=1.5, cache=False)
    fails("sbm", r"'train_frac' \+ 'val_frac' must be <= 1", train_frac=0.7, val_frac=0.5,
          cache=False)


def test_unknown_file_type(tmp_path):
    fails(write(tmp_path, "g.graphml", "<graphml/>"), r"g.graphml: unknown graph file type")


def test_not_a_path_or_name():
    fails(42, r"expects a dataset name or a file path")


# -- dataset files: targets, labels, pickles -----------------------------------------------

def test_bad_target_csv(tmp_path):
    root = tmp_path / "root"
    (root / "lastfm_asia").mkdir(parents=True)
    edges = gzip.compress(b"node_1,node_2\n0,1\n1,2\n")
    (root / "lastfm_asia" / "lastfm_asia_edges.csv.gz").write_bytes(edges)
    target = root / "lastfm_asia" / "lastfm_asia_target.csv.gz"
    target.write_bytes(gzip.compress(b"id,target\n0,1\n1,0\nx,1\n"))
    fails("lastfm", r"lastfm_asia_target.csv.gz line 4: non-integer node id 'x'", root=root,
          cache=False)
    target.write_bytes(gzip.compress(b"id,target\n0,1\n2,0\n"))
    fails("lastfm", r"lastfm_asia_target.csv.gz: no row for node 1", root=root, cache=False)
    target.write_bytes(gzip.compress(b"id,target\n0,1\n1,0\n"))
    fails("lastfm", r"lastfm_asia_edges.csv.gz line 3: node id 2 out of range for 2 nodes",
          root=root, cache=False)
    target.write_bytes(gzip.compress(b"id,label\n0,1\n1,0\n"))
    fails("lastfm", r"lastfm_asia_target.csv.gz line 1: no column 'target'", root=root,
          cache=False)


def test_bad_feature_json(tmp_path):
    root = tmp_path / "root"
    folder = root / "twitch" / "RU"
    folder.mkdir(parents=True)
    (folder / "RU_edges.csv.gz").write_bytes(gzip.compress(b"from,to\n0,1\n"))
    (folder / "RU_target.csv.gz").write_bytes(gzip.compress(
        b"id,days,mature,views,partner,new_id\n5,1,True,1,False,0\n6,1,False,1,False,1\n"))
    features = folder / "RU_features.json.gz"
    features.write_bytes(gzip.compress(b'{"0": [1, 2], "1": [3.5]}'))
    fails("twitch-ru", r"RU_features.json.gz: node '1': feature ids must be integers", root=root,
          cache=False)
    features.write_bytes(gzip.compress(b'{"0": [1, 2], "1": [4000]}'))
    fails("twitch-ru", r"node '1' has feature id 4000, out of range for 3170", root=root,
          cache=False)
    features.write_bytes(gzip.compress(b'{"0": [1, 2], "1": [3]'))
    fails("twitch-ru", r"RU_features.json.gz line 1: invalid JSON", root=root, cache=False)


def test_email_labels(tmp_path):
    root = tmp_path / "root"
    (root / "email-Eu-core").mkdir(parents=True)
    (root / "email-Eu-core" / "email-Eu-core.txt.gz").write_bytes(gzip.compress(b"0 1\n1 7\n"))
    (root / "email-Eu-core" / "email-Eu-core-department-labels.txt.gz").write_bytes(
        gzip.compress(b"0 1\r\n1 0\r\n"))
    fails("email-eu-core", r"email-Eu-core.txt.gz line 2: node id out of range", root=root,
          cache=False)


def planetoid_root(tmp_path):
    root = tmp_path / "root"
    raw = root / "planetoid" / "raw"
    raw.mkdir(parents=True)
    objects = {"x": sp.csr_matrix(np.ones((1, 2))), "tx": sp.csr_matrix(np.ones((1, 2))),
               "allx": sp.csr_matrix(np.ones((501, 2))),
               "y": np.eye(2)[[0]], "ty": np.eye(2)[[1]], "ally": np.eye(2)[[0, 1] * 250 + [0]],
               "graph": {0: [1], 1: [0, 501]}}
    for part, obj in objects.items():
        (raw / f"ind.cora.{part}").write_bytes(pickle.dumps(obj, protocol=2))
    (raw / "ind.cora.test.index").write_text("501\n")
    return root, raw


def test_planetoid_small_file_set_loads(tmp_path):
    root, _ = planetoid_root(tmp_path)
    g = load("cora", root=root, cache=False)
    assert g.num_nodes == 502 and g.num_edges == 4 and int(g.test_mask.sum()) == 1


def test_planetoid_truncated_and_malicious_pickles(tmp_path):
    root, raw = planetoid_root(tmp_path)
    graph = raw / "ind.cora.graph"
    data = graph.read_bytes()
    graph.write_bytes(data[: len(data) // 2])
    fails("cora", r"ind.cora.graph: truncated pickle", root=root, cache=False)
    graph.write_bytes(b"cos\nsystem\n(S'echo hacked'\ntR.")  # would run a shell command
    fails("cora", r"ind.cora.graph: refusing to unpickle os.system", root=root, cache=False)
    graph.write_bytes(pickle.dumps({0: [1], 1: [0, 9999]}, protocol=2))
    fails("cora", r"ind.cora.graph: node id 9999 out of range for 502 nodes", root=root,
          cache=False)
    (raw / "ind.cora.test.index").write_text("501\n-2\n")
    fails("cora", r"ind.cora.test.index line 2: negative node id -2", root=root, cache=False)


def test_error_messages_name_the_file_not_just_the_type(tmp_path):
    # A sanity check on the format of every message above: "<file> line <n>: <what>".
    path = write(tmp_path, "edges.txt", EDGES.format(bad="3.5 6"))
    message = fails(path, "non-integer")
    assert re.fullmatch(r".*edges\.txt line 7: non-integer node id '3\.5'", message)
