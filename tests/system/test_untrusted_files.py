"""Files gnnmesh reads back (checkpoints, stored partitions, parts directories, the dataset
cache) never run code: a hostile pickle is refused with one line naming the file, and what
it would have done (create a marker file) never happens."""

import json
import pickle

import numpy as np
import pytest
import torch

from gnnmesh import ConfigError, GraphError
from gnnmesh.config import Config
from gnnmesh.train import Trainer

from tests.helpers import random_graph
from tests.helpers import gnnmesh, one_error_line

SBM = "sbm:nodes=200,classes=2,features=4"


class Hostile:
    """Unpickled by a trusting loader, creates ``marker``: any code would run the same way."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def hostile_checkpoint(path, marker, form="torch"):
    state = {"epoch": 1, "model": {}, "optimizer": {"state": {}, "param_groups": []},
             "best": {"epoch": 0, "val_acc": -1.0, "test_acc": 0.0, "state": None},
             "history": [Hostile(marker)], "config": {}}
    if form == "torch":
        torch.save(state, path)
    else:  # a bare pickle, as torch's legacy format reads it
        path.write_bytes(pickle.dumps(state))
    return path


def hostile_npy(path, marker):
    np.save(path, np.array([Hostile(marker)], dtype=object), allow_pickle=True)
    return path


@pytest.fixture(scope="module")
def graph():
    return random_graph(n=40, e=160, features=6, classes=3)


# -- the bait works: a trusting loader would run it -------------------------------------------

def test_the_hostile_files_would_run_code_if_trusted(tmp_path):
    marker = tmp_path / "ran"
    torch.load(hostile_checkpoint(tmp_path / "c.pt", marker), weights_only=False)
    assert marker.exists()
    marker.unlink()
    np.load(hostile_npy(tmp_path / "a.npy", marker), allow_pickle=True)
    assert marker.exists()


# -- checkpoints --------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["torch", "pickle"])
def test_hostile_checkpoint_on_resume_is_one_line_and_runs_nothing(tmp_path, form):
    marker = tmp_path / "ran"
    ckpt = hostile_checkpoint(tmp_path / "c.pt", marker, form)
    result = gnnmesh("train", "--dataset", SBM, "--epochs", "2", "--checkpoint", str(ckpt), "--resume")
    one_error_line(result, str(ckpt), "unreadable checkpoint")
    assert not marker.exists()
    assert "epoch" not in result.stdout


@pytest.mark.slow
def test_hostile_checkpoint_under_several_ranks(tmp_path):
    marker = tmp_path / "ran"
    ckpt = hostile_checkpoint(tmp_path / "c.pt", marker)
    result = gnnmesh("train", "--dataset", SBM, "--epochs", "2", "--nproc", "2", "--strategy", "partition",
                     "--partitioner", "rp", "--threads", "1", "--checkpoint", str(ckpt), "--resume",
                     timeout=240)
    one_error_line(result, str(ckpt), "unreadable checkpoint")
    assert not marker.exists()


def _good_checkpoint(graph, tmp_path):
    path = tmp_path / "good.pt"
    Trainer(Config.of(epochs=2, checkpoint=str(path)), graph).fit()
    return path, torch.load(path, weights_only=True)  # what gnnmesh writes reads back weights-only


def _damage(kind, graph, tmp_path):
    path = tmp_path / "c.pt"
    good, state = _good_checkpoint(graph, tmp_path)
    if kind == "garbage":
        path.write_bytes(b"not a checkpoint")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    elif kind == "a list":
        torch.save([1, 2, 3], path)
    elif kind == "missing keys":
        torch.save({"epoch": 3, "model": state["model"]}, path)
    elif kind == "bad epoch":
        torch.save({**state, "epoch": "three"}, path)
    elif kind == "another model":  # same settings recorded, weights of another shape
        name = next(iter(state["model"]))
        torch.save({**state, "model": {**state["model"], name: torch.zeros(1, 1)}}, path)
    elif kind == "bad history":
        torch.save({**state, "history": [{"epoch": 1, "loss": 0.5, "no such field": 1}]}, path)
    return path


@pytest.mark.parametrize("kind, message", [
    ("garbage", "unreadable checkpoint"), ("empty", "unreadable checkpoint"),
    ("truncated", "unreadable checkpoint"), ("a list", "not a gnnmesh checkpoint (holds list"),
    ("missing keys", "not a gnnmesh checkpoint (no 'optimizer', 'best', 'history', 'config')"),
    ("bad epoch", "'epoch' is not a non-negative integer"),
    ("another model", "not a checkpoint of this model"),
    ("bad history", "not a checkpoint of this model"),
])
def test_damaged_or_foreign_checkpoint_is_one_line_naming_it(graph, tmp_path, kind, message):
    path = _damage(kind, graph, tmp_path)
    with pytest.raises(ConfigError) as info:
        Trainer(Config.of(epochs=4, checkpoint=str(path), resume=True), graph).fit()
    text = str(info.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


def test_hostile_checkpoint_in_process(graph, tmp_path):
    marker = tmp_path / "ran"
    path = hostile_checkpoint(tmp_path / "c.pt", marker)
    with pytest.raises(ConfigError, match=r"c.pt: unreadable checkpoint \(it asks to call \S*open"):
        Trainer(Config.of(epochs=4, checkpoint=str(path), resume=True), graph).fit()
    assert not marker.exists() and path.read_bytes()  # left as it was


def test_the_cli_names_a_damaged_checkpoint_in_one_line(tmp_path):
    path = tmp_path / "c.pt"
    torch.save({"epoch": 3}, path)
    one_error_line(gnnmesh("train", "--dataset", SBM, "--epochs", "4", "--checkpoint", str(path), "--resume"),
                   str(path), "not a gnnmesh checkpoint")


# -- arrays: stored partitions, parts directories, the dataset cache ----------------------------

def test_hostile_partition_file_runs_nothing(graph, tmp_path):
    from gnnmesh.partition import load_partition
    marker = tmp_path / "ran"
    path = hostile_npy(tmp_path / "p.npy", marker)
    with pytest.raises(GraphError, match="p.npy: not a readable .npy partition file"):
        load_partition(path, graph)
    assert not marker.exists()


def test_hostile_partition_file_from_the_cli(tmp_path):
    marker = tmp_path / "ran"
    path = hostile_npy(tmp_path / "p.npy", marker)
    result = gnnmesh("train", "--dataset", SBM, "--epochs", "1", "--nproc", "2", "--strategy", "partition",
                     "--partition-file", str(path), "--threads", "1", timeout=240)
    one_error_line(result, "p.npy")
    assert not marker.exists()


def test_hostile_part_file_runs_nothing(graph, tmp_path):
    from gnnmesh.parts import MANIFEST, open_parts
    from gnnmesh.parallel.partition.parts import write_partition_parts
    from gnnmesh.parts.store import checksum
    from gnnmesh.partition import partition
    marker = tmp_path / "ran"
    directory = tmp_path / "parts"
    write_partition_parts(graph, partition(graph, 2, "rp", cache=False), directory, "random")
    victim = hostile_npy(directory / "rank-00001" / "owned.npy", marker)
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["ranks"][1]["files"]["owned"] = checksum(victim)  # passes the checksum: only the loader stands
    (directory / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(GraphError, match="owned.npy: unreadable part file"):
        open_parts(directory).rank(1).array("owned")
    assert not marker.exists()


def test_hostile_cache_entry_is_rebuilt_and_runs_nothing(tmp_path, monkeypatch):
    from gnnmesh.datasets import load
    monkeypatch.setenv("GNNMESH_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "ran"
    first = load(SBM)
    (entry,) = (tmp_path / "cache").iterdir()
    hostile_npy(entry / "x.npy", marker)
    with pytest.warns(UserWarning, match="ignoring unreadable cache entry"):
        again = load(SBM)
    assert not marker.exists() and torch.equal(again.x, first.x)


class CallsSystem:
    def __reduce__(self):
        import os
        return (os.system, ("true",))


def test_a_checkpoint_calling_a_blocked_module_is_named_and_refused(tmp_path):
    """torch words a refused call from a module it blocks (os) differently from a global it does
    not allow; both are named."""
    from gnnmesh import checkpoint
    from gnnmesh.errors import ConfigError
    path = tmp_path / "c.pt"
    torch.save({"history": [CallsSystem()]}, path)
    with pytest.raises(ConfigError, match=r"asks to call \S*system, which no checkpoint does; refused"):
        checkpoint.load(path)


@pytest.mark.parametrize("field, value", [("features", 2**40), ("classes", 2**40)])
def test_widths_that_disagree_with_the_weights_allocate_nothing(graph, tmp_path, field, value):
    """gnnmesh.load (and export, and predict's reading of the model) builds the model the
    checkpoint's widths describe: widths of 2^40 are compared with the weights on the meta
    device and refused, where they used to ask the allocator for terabytes."""
    import gnnmesh
    path = tmp_path / "c.pt"
    Trainer(Config.of(epochs=1, checkpoint=str(path)), graph).fit()
    state = torch.load(path, weights_only=True)
    torch.save({**state, "widths": {**state["widths"], field: value}}, path)
    with pytest.raises(ConfigError) as info:
        gnnmesh.load(path)
    text = str(info.value)
    assert text.startswith(f"{path}: not a checkpoint of this model") and "1099511627776" in text, text


# -- a checkpoint that names code ------------------------------------------------------------------
# A checkpoint of a user's model names its class; reading it must never import what it names
# unchecked: only a file of the sha256 it records, and a checkpoint that records none runs none.

PAYLOAD = ("from pathlib import Path\nPath({marker!r}).write_text('ran')\n"
           "import torch\n\nclass Net(torch.nn.Module):\n    pass\n")


def _naming_checkpoint(graph, tmp_path, monkeypatch, form):
    """A good checkpoint whose config names a file or a module that, imported, creates ``ran``
    (``recorded``: a file of its name, at its recorded place, but of another recorded sha256)."""
    marker = tmp_path / "ran"
    if form in ("file", "recorded"):
        payload = tmp_path / "payload.py"
        name = f"{payload}:Net"
    else:  # an importable module, as 'this:X' names the standard library's
        payload = tmp_path / "gnnmesh_payload_module.py"
        name = "gnnmesh_payload_module:Net"
        monkeypatch.syspath_prepend(str(tmp_path))
    payload.write_text(PAYLOAD.format(marker=str(marker)))
    path, state = _good_checkpoint(graph, tmp_path)
    from gnnmesh.settings import BUILT_IN_OPTIONS, ModelSection
    state["config"].update({option: getattr(ModelSection(), option) for option in BUILT_IN_OPTIONS}, model=name)
    if form == "recorded":
        state["user_model"] = {"name": name, "sha256": "0" * 64, "file": payload.name}
    torch.save(state, path)
    return path, marker


@pytest.mark.parametrize("form", ["file", "module", "recorded"])
def test_a_checkpoint_naming_code_imports_nothing_and_asks_for_model(graph, tmp_path, monkeypatch, form):
    import gnnmesh
    from tests.helpers import gnnmesh_in_process
    path, marker = _naming_checkpoint(graph, tmp_path, monkeypatch, form)
    commands = {"predict": ["predict", "--checkpoint", path, "--out", tmp_path / "p", "--dataset", SBM],
                "export": ["export", "--checkpoint", path, "--to", "pyg", "--out", tmp_path / "e"],
                "resume": ["train", "--dataset", SBM, "--epochs", "3", "--checkpoint", path, "--resume"]}
    for command, args in commands.items():
        result = gnnmesh_in_process(*args)
        one_error_line(result, str(path))
        if command == "resume":  # a run given no --model trains no model of the user's
            asked = "give it with --model"
        elif form == "recorded":
            asked = "changed since training (sha256 000000000000... recorded); give the file it was trained from"
        else:
            asked = "give the model with --model"
        assert asked in result.stderr, result.stderr
        assert not marker.exists(), command
    refusal = "changed since training" if form == "recorded" else "never imports the code it names unchecked"
    for load in (lambda: gnnmesh.load(path), lambda: Trainer.from_checkpoint(path, graph)):
        with pytest.raises(ConfigError, match=refusal):
            load()
        assert not marker.exists()
