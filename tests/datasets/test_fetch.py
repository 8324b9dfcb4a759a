"""``gnnmesh datasets --fetch`` against a server on 127.0.0.1 laid out like upstream (built
from the shared data), and the Cora and CiteSeer copies shipped in the package."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gnnmesh import ConfigError, GraphError
from gnnmesh.cli import main
from gnnmesh.datasets import load
from gnnmesh.datasets.bundled import ROOT as BUNDLED_ROOT
from gnnmesh.datasets.fetch import FetchError, fetch
from gnnmesh.datasets.registry import DATASETS
from gnnmesh.datasets.upstream import MIRROR_VARIABLE, UPSTREAM
from tests.forked import run_cli
from tests.helpers import same_graph


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))


def served_bytes(data_root, file) -> bytes:
    """What upstream serves for ``file``: the shared copy, gunzipped where upstream is plain."""
    stored = (data_root / file.path).read_bytes()
    return gzip.decompress(stored) if file.gzip else stored


class _Handler(SimpleHTTPRequestHandler):
    """Serves a directory; paths in ``server.truncated`` get a Content-Length larger than
    the body, then the connection closes."""

    def do_GET(self):
        relative = self.path.lstrip("/")
        if relative not in self.server.truncated:
            return super().do_GET()
        body = (self.server.directory / relative).read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.close_connection = True

    def log_message(self, *args):
        pass


class Mirror:
    """An upstream look-alike: ``publish`` puts a dataset's files where upstream has them."""

    def __init__(self, directory, data_root):
        self.directory, self.data_root = directory, data_root
        self.server = ThreadingHTTPServer(("127.0.0.1", 0),
                                          partial(_Handler, directory=str(directory)))
        self.server.directory, self.server.truncated = directory, set()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def publish(self, name):
        for file in UPSTREAM[name].files:
            target = self.directory / file.source
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(served_bytes(self.data_root, file))

    def tamper(self, file):
        path = self.directory / file.source
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    def truncate(self, file):
        self.server.truncated.add(file.source)


@pytest.fixture
def mirror(tmp_path, data_root, monkeypatch):
    served = Mirror(tmp_path / "upstream", data_root)
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(MIRROR_VARIABLE, served.url)
    yield served
    served.server.shutdown()
    served.server.server_close()
    thread.join()


def files_under(root) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_pinned_checksums_match_the_shared_copies(data_root):
    for dataset in DATASETS:
        if not dataset.files:
            continue
        upstream = UPSTREAM[dataset.name]
        stored = {spec[0] if isinstance(spec, tuple) else spec for spec in dataset.files.values()}
        needed = {spec[0] if isinstance(spec, tuple) else spec
                  for role, spec in dataset.files.items() if role not in dataset.optional}
        fetched = {file.path for file in upstream.files}
        assert needed <= fetched <= stored, dataset.name
        assert bool(upstream.partial) == ("PARTIAL" in dataset.description), dataset.name
        for file in upstream.files:
            digest = hashlib.sha256(served_bytes(data_root, file)).hexdigest()
            assert digest == file.sha256, file.path


@pytest.mark.timeout(120)
def test_fetched_datasets_load_as_the_shared_copies(mirror, data_root, tmp_path):
    root = tmp_path / "data"
    for name in ("email-eu-core", "karate"):  # upstream .gz as served, plain text gzipped here
        mirror.publish(name)
        log = io.StringIO()
        summary = fetch(name, root, progress=log)
        assert summary.startswith(f"{name}: ") and "verified" in summary and "PARTIAL" not in summary
        assert log.getvalue().count("sha256 verified\n") == len(UPSTREAM[name].files)
        fetched, shared = load(name, root=root, cache=False), load(name, root=data_root, cache=False)
        for graph in (fetched, shared):
            graph.meta.pop("source_file", None)  # where each was read from
        same_graph(fetched, shared)
    assert files_under(root) == ["email-Eu-core", "email-Eu-core/email-Eu-core-department-labels.txt.gz",
                                 "email-Eu-core/email-Eu-core.txt.gz", "gunduzvd_mtx",
                                 "gunduzvd_mtx/karate.mtx"]


@pytest.mark.timeout(60)
def test_progress_counts_bytes_on_a_terminal(mirror, tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    mirror.publish("karate")
    out = Terminal()
    fetch("karate", tmp_path / "data", progress=out)
    assert out.getvalue() == ("\rgunduzvd_mtx/karate.mtx: 1,651 of 1,651 bytes"
                              "\rgunduzvd_mtx/karate.mtx: 1,651 bytes, sha256 verified\n")


@pytest.mark.timeout(60)
def test_a_partial_dataset_says_so(mirror, tmp_path):
    mirror.publish("lastfm")
    summary = fetch("lastfm", tmp_path, progress=io.StringIO())
    assert "PARTIAL: lastfm_asia_features.json" in summary
    assert load("lastfm", root=tmp_path, cache=False).x is None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault,message", [("tamper", "checksum mismatch"),
                                           ("truncate", "truncated transfer")])
@pytest.mark.parametrize("root_exists", [True, False])
def test_a_failed_fetch_is_one_line_and_leaves_nothing(mirror, tmp_path, fault, message,
                                                       root_exists):
    mirror.publish("email-eu-core")
    last = UPSTREAM["email-eu-core"].files[-1]  # the first file has verified by then
    getattr(mirror, fault)(last)
    root = tmp_path / "data"
    if root_exists:
        root.mkdir()
    env = {**os.environ, MIRROR_VARIABLE: mirror.url}
    result = run_cli("datasets", "--fetch", "email-eu-core", "--data-root", str(root), env=env, timeout=100)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("gnnmesh: error:")]
    assert len(errors) == 1 and last.path in errors[0] and message in errors[0], result.stderr
    assert result.stderr.splitlines()[-1] == errors[0]  # progress lines come before it
    assert (files_under(root) == []) if root_exists else not root.exists()


@pytest.mark.timeout(60)
def test_http_errors_and_unreachable_mirrors_name_the_file(mirror, tmp_path, monkeypatch):
    with pytest.raises(FetchError, match=r"gunduzvd_mtx/karate.mtx: HTTP 404 .*karate.mtx\)$"):
        fetch("karate", tmp_path / "data", progress=io.StringIO())
    monkeypatch.setenv(MIRROR_VARIABLE, "http://127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(FetchError, match=r"gunduzvd_mtx/karate.mtx: cannot download: "):
        fetch("karate", tmp_path / "data", progress=io.StringIO())
    assert not (tmp_path / "data").exists()


def test_fetch_refuses_what_it_cannot_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GNNMESH_DATA", raising=False)
    with pytest.raises(ConfigError, match="no data root: pass --data-root DIR or set GNNMESH_DATA"):
        fetch("karate")
    with pytest.raises(GraphError, match="'sbm' is generated: there is nothing to fetch"):
        fetch("sbm", tmp_path)
    with pytest.raises(GraphError, match="unknown dataset 'coraa'"):
        fetch("coraa", tmp_path)
    assert main(["datasets", "--fetch", "karate"]) == 2
    assert capsys.readouterr().err.startswith("gnnmesh: error: --fetch karate: no data root")


def test_cora_and_citeseer_ship_with_the_package(data_root, tmp_path, monkeypatch):
    monkeypatch.delenv("GNNMESH_DATA", raising=False)
    for name in ("cora", "citeseer"):
        shared = load(name, root=data_root, cache=False)
        same_graph(load(name, cache=False), shared)
        same_graph(load(name, root=tmp_path, cache=False), shared)  # a root without them
    assert (BUNDLED_ROOT / "planetoid" / "LICENSE").is_file()


def test_a_root_holding_the_files_wins(data_root, tmp_path):
    raw = tmp_path / "planetoid" / "raw"
    shutil.copytree(data_root / "planetoid" / "raw", raw)
    (raw / "ind.cora.test.index").write_text("")
    with pytest.raises(GraphError, match=f"{raw}/ind.cora.test.index: no test node ids"):
        load("cora", root=tmp_path, cache=False)


@pytest.mark.timeout(300)
def test_train_cora_with_no_data_root(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GNNMESH_DATA"}
    result = run_cli("train", "--dataset", "cora", "--epochs", "2", "--threads", "1", env=env, cwd=tmp_path,
                     timeout=280)
    assert result.returncode == 0, result.stderr
    assert "done:" in result.stdout
