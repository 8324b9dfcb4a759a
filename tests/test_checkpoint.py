"""The checkpoint format (gnnmesh.checkpoint): the layout written carries its version, and a
checkpoint in a previous layout (version 2, without the learning-rate schedule, or the
unversioned one every earlier release wrote) still loads, predicts and resumes, migrated on
reading."""

import pytest
import torch

import gnnmesh
from gnnmesh import ConfigError, checkpoint
from gnnmesh.config import Config
from gnnmesh.train import Trainer
from gnnmesh.view import GraphView

from tests.helpers import random_graph

# The unversioned layout, key by key: what the trainer wrote before the format had a version.
# The oldest checkpoints recorded neither the model's widths nor the job that wrote them.
UNVERSIONED = ("epoch", "model", "optimizer", "best", "history", "config", "widths", "job")
OLDEST = ("epoch", "model", "optimizer", "best", "history", "config")


@pytest.fixture(scope="module")
def graph():
    return random_graph(n=60, e=300, features=10, classes=3)


@pytest.fixture(scope="module")
def written(graph, tmp_path_factory):
    """A checkpoint of the current layout, after 2 of 4 epochs."""
    path = tmp_path_factory.mktemp("current") / "c.pt"
    Trainer(Config.of(epochs=2, hidden=8, seed=3, checkpoint=str(path)), graph).fit()
    return path


def in_layout(source, directory, keys, version=None) -> str:
    """The checkpoint ``source`` rewritten in an earlier layout: ``keys`` only, and ``version``
    (None: no version)."""
    state = torch.load(source, weights_only=True)
    path = directory / "old.pt"
    torch.save({key: state[key] for key in keys} | ({} if version is None else {"version": version}), path)
    return str(path)


# Version 2: the versioned layout before the learning-rate schedule's state.
VERSION_2 = UNVERSIONED + ("user_model",)


def test_a_version_2_checkpoint_is_migrated_and_resumes_as_it_did(graph, written, tmp_path):
    old = in_layout(written, tmp_path, VERSION_2, version=2)
    migrated = checkpoint.load(old)
    assert migrated["version"] == checkpoint.VERSION and checkpoint.schedule(migrated) is None
    current = tmp_path / "current.pt"  # resumed runs write their checkpoint: the fixture's stays
    current.write_bytes(written.read_bytes())
    runs = []
    for path in (str(current), old):
        config = Config.of(epochs=4, hidden=8, seed=3, checkpoint=path, resume=True)
        runs.append([r.loss for r in Trainer(config, graph).fit().history])
    assert len(runs[0]) == 4 and runs[0] == runs[1]


def test_the_layout_written_carries_its_version_and_every_field(written):
    state = torch.load(written, weights_only=True)
    assert state["version"] == checkpoint.VERSION
    assert set(state) == set(UNVERSIONED) | {"version", "user_model", "schedule"}
    assert checkpoint.structure_problem(state) == ""


@pytest.mark.parametrize("keys", [UNVERSIONED, OLDEST], ids=["unversioned", "oldest"])
def test_an_unversioned_checkpoint_is_migrated(written, tmp_path, keys):
    current = checkpoint.load(written)
    migrated = checkpoint.load(in_layout(written, tmp_path, keys))
    assert migrated["version"] == checkpoint.VERSION
    assert checkpoint.widths(migrated) == checkpoint.widths(current) == (10, 3)
    assert checkpoint.job(migrated) is None and checkpoint.user_model_sha256(migrated) is None
    assert checkpoint.progress(migrated)[0] == 2


@pytest.mark.parametrize("keys", [UNVERSIONED, OLDEST], ids=["unversioned", "oldest"])
def test_an_unversioned_checkpoint_predicts_as_it_did(graph, written, tmp_path, keys):
    old = in_layout(written, tmp_path, keys)
    view = GraphView(graph.adj)
    expected = gnnmesh.load(written)[0](view, graph.x)
    assert torch.equal(gnnmesh.load(old)[0](view, graph.x), expected)


def test_an_unversioned_checkpoint_resumes_as_it_did(graph, written, tmp_path):
    old = in_layout(written, tmp_path, OLDEST)
    runs = []
    for path in (str(written), old):
        config = Config.of(epochs=4, hidden=8, seed=3, checkpoint=path, resume=True)
        runs.append([r.loss for r in Trainer(config, graph).fit().history])
    assert len(runs[0]) == 4 and runs[0] == runs[1]


@pytest.mark.parametrize("version", [checkpoint.VERSION + 1, 1, "2", True])
def test_a_version_this_release_does_not_read_is_refused(written, tmp_path, version):
    """A newer layout is not guessed at; 1 is the unversioned layout, never written as a number."""
    state = torch.load(written, weights_only=True)
    path = tmp_path / "v.pt"
    torch.save({**state, "version": version}, path)
    with pytest.raises(ConfigError, match=rf"^{path}: not a gnnmesh checkpoint \(format version .*; this gnnmesh "
                                          rf"reads versions 1 \(unversioned\) to {checkpoint.VERSION}\)$"):
        checkpoint.load(path)


def test_the_current_layout_needs_its_widths(written, tmp_path):
    state = torch.load(written, weights_only=True)
    path = tmp_path / "w.pt"
    torch.save({k: v for k, v in state.items() if k != "widths"}, path)
    with pytest.raises(ConfigError, match=r"not a gnnmesh checkpoint \(no 'widths'\)"):
        checkpoint.load(path)


def test_the_former_reader_names_still_answer_with_a_warning():
    from gnnmesh import trained
    with pytest.warns(DeprecationWarning, match="gnnmesh.trained.weights_of is now gnnmesh.checkpoint.weights"):
        assert trained.weights_of is checkpoint.weights


def _with_user_model(written, tmp_path, record) -> str:
    state = torch.load(written, weights_only=True)
    path = tmp_path / "u.pt"
    torch.save({**state, "config": {**state["config"], "model": "net.py:Net"}, "user_model": record}, path)
    return str(path)


def test_a_user_models_record_without_a_path_reads_as_recording_none(written, tmp_path):
    """Version 3 as first written: a user's model's name and sha256, no path (an optional entry)."""
    state = checkpoint.load(_with_user_model(written, tmp_path, {"name": "net.py:Net", "sha256": "a" * 64}))
    assert checkpoint.user_model_file(state) is None and checkpoint.user_model_sha256(state) == "a" * 64
    recorded = checkpoint.user_model_record("net.py:Net", "a" * 64, "../models/net.py")
    state = checkpoint.load(_with_user_model(written, tmp_path, recorded))
    assert checkpoint.user_model_file(state) == "../models/net.py"


@pytest.mark.parametrize("file", ["/etc/net.py", "", 3])
def test_a_recorded_path_that_is_not_relative_is_refused(written, tmp_path, file):
    path = _with_user_model(written, tmp_path, checkpoint.user_model_record("net.py:Net", "a" * 64, file))
    with pytest.raises(ConfigError, match=r"not a gnnmesh checkpoint \('user_model' is not a model's name, sha256 "
                                          r"and file\)"):
        checkpoint.load(path)
