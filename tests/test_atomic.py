"""Directories written whole (``gnnmesh.atomic.staged_directory``) replace only what a gnnmesh
run of the same kind wrote there. Before, any directory holding a file of the marker's name
(a web project's ``manifest.json``) was deleted whole with everything else in it, and so was
an earlier output holding the user's own files. Every writer is tried here: a directory with
a foreign marker and a ``src/`` folder, and an earlier output with a file and a folder of the
user's added, are refused and left as they were; a clean earlier output is replaced."""

from __future__ import annotations

import errno
import re
import os
from pathlib import Path

import numpy as np
import pytest

from gnnmesh import cli
from gnnmesh.atomic import check_replaceable, staged_directory
from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.datasets.sharding import write_graph_shards
from gnnmesh.datasets.sharded import open_shards
from gnnmesh.errors import ConfigError
from gnnmesh.partition import partition
from gnnmesh.parallel.grid3d.block_files import write_block_files
from gnnmesh.parallel.partition.parts import write_partition_parts
from gnnmesh.parallel.grid3d.parts import write_grid_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.predict import store
from gnnmesh.train import Trainer

from tests.helpers import gnnmesh_in_process, one_error_line, random_graph

SBM = "sbm:nodes=120,classes=3,features=6,seed=1"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small graph, its shard set, a checkpoint and a metrics file: what the writers take."""
    root = tmp_path_factory.mktemp("inputs")
    graph = random_graph()
    write_graph_shards(graph, root / "set", 2)
    Trainer(Config.of(dataset=SBM, epochs=2, hidden=4, checkpoint=str(root / "c.pt")), load(SBM)).fit()
    assert cli.main(["train", "--dataset", SBM, "--epochs", "2", "--metrics", str(root / "run.jsonl"),
                     "--quiet"]) == 0
    return {"graph": graph, "set": root / "set", "checkpoint": root / "c.pt", "metrics": root / "run.jsonl"}


def _prediction(inputs, out):
    store.write(out, np.arange(3), np.ones((3, 2), np.float32), {"graph": {"nodes": 3}})


def _from_shards(inputs, out):
    from gnnmesh.parallel.partition.parts_from_shards import write_parts_from_shards
    write_parts_from_shards(open_shards(inputs["set"]), out, method="contiguous", epsilon=0.05, seed=0, dataset="g")


def _export(inputs, out):
    from gnnmesh.export import export_pyg
    export_pyg(inputs["checkpoint"], out)


def _report(inputs, out):
    from gnnmesh.report import write_report
    write_report([inputs["metrics"]], out)


# every writer of a directory: (how it writes one into ``out``, the file it writes last, what it is called)
WRITERS = {
    "prediction": (_prediction, "manifest.json", "prediction directory"),
    "partition parts": (lambda i, out: write_partition_parts(i["graph"], partition(i["graph"], 2, "rp", cache=False),
                                                             out, "random"), "manifest.json", "parts directory"),
    "tensor parts": (lambda i, out: write_tensor_parts(i["graph"], 2, out, "random"), "manifest.json",
                     "parts directory"),
    "grid3d parts": (lambda i, out: write_grid_parts(i["graph"], {"x": 1, "y": 1, "z": 2}, out, "random"),
                     "manifest.json", "parts directory"),
    "parts from shards": (_from_shards, "manifest.json", "parts directory"),
    "shard set": (lambda i, out: write_graph_shards(i["graph"], out, 2), "meta.json", "shard set"),
    "block files": (lambda i, out: write_block_files(i["graph"], out, (2, 2), seed=0), "manifest.json",
                    "block-file directory"),
    "export": (_export, "model.json", "PyG export"),
    "report": (_report, "report.md", "report directory"),
}


def tree(directory: Path) -> dict:
    """Every file below ``directory`` with its bytes, and every folder (as None)."""
    return {str(p.relative_to(directory)): None if p.is_dir() else p.read_bytes()
            for p in sorted(directory.rglob("*"))}


def nothing_left_beside(directory: Path) -> None:
    """No temporary and no lock file beside ``directory`` (nor inside it)."""
    for folder in (directory.parent, directory):
        left = [n for n in os.listdir(folder) if ".tmp-" in n or n.endswith(".lock")] if folder.is_dir() else []
        assert not left, left


@pytest.mark.parametrize("writer", WRITERS)
def test_a_foreign_directory_with_the_markers_name_is_refused_and_kept(inputs, tmp_path, writer):
    write, marker, what = WRITERS[writer]
    out = tmp_path / "web"
    (out / "src").mkdir(parents=True)
    (out / "src" / "app.js").write_text("console.log('mine')\n")
    (out / marker).write_text('{"name": "my web app", "version": 1, "format": 1}\n')
    before = tree(out)
    with pytest.raises(ConfigError) as refusal:
        write(inputs, out)
    message = str(refusal.value)
    assert message.startswith(f"{out}: exists and is not a {what} ({marker}: ") and "\n" not in message, message
    assert message.endswith("; refusing to overwrite it")
    assert tree(out) == before
    nothing_left_beside(out)


@pytest.mark.parametrize("writer", WRITERS)
def test_an_earlier_output_holding_the_users_files_is_refused_and_kept(inputs, tmp_path, writer):
    write, _, what = WRITERS[writer]
    out = tmp_path / "out"
    write(inputs, out)
    (out / "notes.txt").write_text("mine")
    (out / "mine").mkdir()
    (out / "mine" / "a.txt").write_text("mine too")
    before = tree(out)
    with pytest.raises(ConfigError, match=rf"^{out}: exists and is not a {what} \(it also holds mine/, notes.txt, "
                                          r"which gnnmesh did not write there\); refusing to overwrite it$"):
        write(inputs, out)
    assert tree(out) == before
    nothing_left_beside(out)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_clean_earlier_output_is_replaced(inputs, tmp_path, writer):
    write, marker, _ = WRITERS[writer]
    out = tmp_path / "out"
    write(inputs, out)
    first = tree(out)
    (out / marker).touch()  # tell the second write's marker from the first's
    write(inputs, out)
    assert set(tree(out)) == set(first) and (out / marker).stat().st_size > 0
    nothing_left_beside(out)


def test_an_empty_or_absent_directory_is_written(inputs, tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "absent" / "deeper"):
        _prediction(inputs, out)
        assert store.read(out).ids.tolist() == [0, 1, 2]


def test_a_file_of_the_users_is_found_deep_in_an_earlier_output(inputs, tmp_path):
    out = tmp_path / "parts"
    WRITERS["partition parts"][0](inputs, out)
    (out / "rank-00001" / "extra.npy").write_bytes(b"mine")
    with pytest.raises(ConfigError, match=r"it also holds rank-00001/extra.npy, which gnnmesh did not write"):
        WRITERS["partition parts"][0](inputs, out)
    assert (out / "rank-00001" / "extra.npy").read_bytes() == b"mine"


def test_a_link_in_an_earlier_output_is_not_written_by_gnnmesh(inputs, tmp_path):
    out, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    _prediction(inputs, out)
    elsewhere.mkdir()
    (out / "ids-00000.npy").unlink()
    (out / "ids-00000.npy").symlink_to(elsewhere)  # a link where a shard was: not what the writer wrote
    with pytest.raises(ConfigError, match=r"it also holds ids-00000.npy, which gnnmesh did not write"):
        _prediction(inputs, out)
    assert elsewhere.is_dir() and (out / "ids-00000.npy").is_symlink()


def test_a_file_where_the_directory_goes_is_refused(inputs, tmp_path):
    out = tmp_path / "p"
    out.write_text("mine")
    with pytest.raises(ConfigError, match=rf"^{out}: exists and is not a prediction directory \(not a directory\)"):
        _prediction(inputs, out)
    assert out.read_text() == "mine"


def test_what_appears_while_the_output_is_staged_is_kept(inputs, tmp_path):
    """The check is made again just before the earlier output is replaced."""
    from gnnmesh.atomic import OutputKind
    out = tmp_path / "p"
    _prediction(inputs, out)
    kind = OutputKind("prediction directory", "manifest.json", store.written_files)
    with pytest.raises(ConfigError, match="it also holds late.txt"):
        with staged_directory(out, kind) as tmp:
            (tmp / "manifest.json").write_text("{}")
            (out / "late.txt").write_text("written by the user meanwhile")
    assert (out / "late.txt").exists() and store.read(out).ids.tolist() == [0, 1, 2]
    nothing_left_beside(out)


def test_a_failed_replacement_puts_the_earlier_output_back(inputs, tmp_path, monkeypatch):
    out = tmp_path / "p"
    _prediction(inputs, out)
    before = tree(out)
    rename, failed = os.rename, []

    def fail_into_place(source, target):  # moving the earlier output aside works; the new one's move fails
        if Path(target) == out and not failed:
            failed.append(source)
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(source))
        rename(source, target)

    monkeypatch.setattr(os, "rename", fail_into_place)
    with pytest.raises(OSError) as err:
        with staged_directory(out, store.OUTPUT) as tmp:
            (tmp / "manifest.json").write_text("{}")
    monkeypatch.undo()
    assert failed and err.value.filename == str(out) and tree(out) == before
    nothing_left_beside(out)


def test_check_replaceable_names_the_directory_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("web").mkdir()
    Path("web/index.html").write_text("<html>")
    with pytest.raises(ConfigError, match=r"^web: exists and is not a prediction directory \(it holds index.html "
                                          r"and no manifest.json\); refusing to overwrite it$"):
        check_replaceable("web", store.OUTPUT)


# -- the commands: one line, status 2, nothing deleted ----------------------------------------------

def web_project(root: Path) -> Path:
    web = root / "web"
    (web / "src").mkdir(parents=True)
    (web / "src" / "index.js").write_text("export default 1;\n")
    (web / "manifest.json").write_text('{"name": "my app", "start_url": "/"}\n')
    return web


@pytest.mark.parametrize("command", [
    ["predict", "--checkpoint", "{checkpoint}", "--out", "{out}"],
    ["partition", "--dataset", SBM, "--nparts", "2", "--partitioner", "rp", "--write-parts", "{out}"],
    ["partition", "--dataset", SBM, "--nparts", "2", "--strategy", "tensor", "--write-parts", "{out}"],
    ["partition", "--dataset", SBM, "--strategy", "grid3d", "--grid", "1,1,2", "--write-parts", "{out}"],
    ["partition", "--dataset", SBM, "--strategy", "grid3d", "--grid", "2,2", "--write-shards", "{out}"],
    ["partition", "--input", "{set}", "--write-parts", "{out}"],
    ["datasets", "--shard", SBM, "--out", "{out}", "--shards", "2"],
    ["export", "--checkpoint", "{checkpoint}", "--to", "pyg", "--out", "{out}"],
    ["report", "{metrics}", "--out", "{out}"],
], ids=lambda c: " ".join(c[:1] + [f for f in c if f.startswith("--write") or f == "--input"]))
def test_every_command_refuses_a_web_project_before_its_work(inputs, tmp_path, command):
    web = web_project(tmp_path)
    before = tree(web)
    args = [a.format(out=web, **inputs) for a in command]
    result = gnnmesh_in_process(*args)
    one_error_line(result, f"{web}: exists and is not a ", "; refusing to overwrite it")
    assert result.stdout == ""  # refused before any work
    assert tree(web) == before
    nothing_left_beside(web)


@pytest.mark.parametrize("given", [".", "..", "{here}"])
def test_the_current_directory_or_one_above_it_is_never_replaced(tmp_path, monkeypatch, given):
    """Replacing it would leave this process and its shell in a removed directory (and ``--out .``
    was staged inside it, leaving a ``..tmp-*`` folder behind when the rename failed)."""
    here = tmp_path / "empty" / "here"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)
    given = given.format(here=here)
    with pytest.raises(ConfigError, match=rf"^{re.escape(given)}: is the current directory or holds it, and a "
                                          r"prediction directory replaces its directory whole; choose another path$"):
        check_replaceable(given, store.OUTPUT)
    assert os.listdir(here) == [] and os.listdir(here.parent) == ["here"]
