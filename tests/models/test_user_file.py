"""A checkpoint of your own ``FILE.py:CLASS`` model does not depend on the directory it is used
from: it records its file's path relative to itself, so a checkpoint moved with its model
file predicts, exports and resumes from any directory; a file that changed since training,
or none found, is one line (status 2)."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import gnnmesh
from gnnmesh import ConfigError, checkpoint
from gnnmesh.datasets import load
from gnnmesh.models import user_file
from gnnmesh.predict import read
from gnnmesh.train import Trainer

from tests.helpers import gnnmesh_in_process, one_error_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DATASET = "sbm:nodes=80,classes=3,features=6"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run trained from its own directory, ``--model models/net.py:GraphConv`` (a copy of
    examples/graphconv.py) and ``--checkpoint runs/c.pt``, both relative; its prediction there;
    and the directory moved whole elsewhere (``moved``)."""
    root = tmp_path_factory.mktemp("user_file")
    project = root / "project"
    (project / "models").mkdir(parents=True)
    (project / "runs").mkdir()
    shutil.copyfile(EXAMPLES / "graphconv.py", project / "models" / "net.py")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        train = gnnmesh_in_process("train", "--model", "models/net.py:GraphConv", "--model-args", "hidden=8",
                                   "--dataset", DATASET, "--epochs", "2", "--checkpoint", "runs/c.pt", "--quiet")
        assert train.returncode == 0, train.stderr
        done = gnnmesh_in_process("predict", "--checkpoint", "runs/c.pt", "--out", root / "before", "--quiet")
        assert done.returncode == 0, done.stderr
    moved = root / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.copytree(project, moved)
    return {"root": root, "project": project, "moved": moved, "before": read(root / "before")}


@pytest.fixture
def moved(trained, tmp_path, monkeypatch):
    """A fresh copy of the moved run, with the current directory a third one holding neither."""
    copy = tmp_path / "moved"
    shutil.copytree(trained["moved"], copy)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return copy


def test_the_checkpoint_records_the_file_relative_to_itself(trained):
    state = torch.load(trained["project"] / "runs" / "c.pt", weights_only=True)
    assert state["user_model"]["file"] == "../models/net.py"
    assert state["user_model"]["name"] == state["config"]["model"] == "models/net.py:GraphConv"


def test_a_moved_checkpoint_and_file_predict_the_same_from_another_directory(trained, moved):
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p", "--quiet")
    assert result.returncode == 0, result.stderr
    got, want = read("p"), trained["before"]
    assert np.array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.values, want.values, atol=1e-5)


def test_a_moved_checkpoint_loads_in_python_without_model(trained, moved):
    model, config = gnnmesh.load(moved / "runs" / "c.pt")
    assert type(model).__name__ == "GraphConv"
    assert config.model.name == f"{moved / 'models' / 'net.py'}:GraphConv"
    ids, values = Trainer.from_checkpoint(moved / "runs" / "c.pt", load(DATASET)).predict()
    assert np.array_equal(ids, trained["before"].ids)
    np.testing.assert_allclose(values, trained["before"].values, atol=1e-5)


def test_a_file_that_changed_since_training_is_one_line(moved):
    source = moved / "models" / "net.py"
    source.write_text(source.read_text() + "\n# changed\n")
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p")
    one_error_line(result, f"{moved / 'runs' / 'c.pt'}: the model file {source} is not the one the model was "
                   "trained from: it changed since training", "give the file it was trained from with --model")
    assert not Path("p").exists()


def test_the_original_file_given_with_model_is_used_wherever_it_is(trained, moved):
    source = moved / "models" / "net.py"
    original = moved.parent / "kept.py"
    shutil.copyfile(source, original)
    source.write_text(source.read_text() + "\n# changed\n")
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p", "--quiet",
                                "--model", f"{original}:GraphConv")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(read("p").values, trained["before"].values, atol=1e-5)


def test_no_file_found_is_one_line_naming_the_paths_tried(moved):
    (moved / "models" / "net.py").unlink()
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p")
    one_error_line(result, "its file is in none of the places looked in", str(moved / "models" / "net.py"),
                   "models/net.py", str(moved / "runs" / "net.py"), "give the file it was trained from with --model")


def test_a_file_of_the_recorded_name_beside_the_checkpoint_is_found(trained, moved):
    shutil.move(moved / "models" / "net.py", moved / "runs" / "net.py")
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p", "--quiet")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(read("p").values, trained["before"].values, atol=1e-5)


def test_a_checkpoint_recording_no_path_finds_its_file_by_its_name(trained, moved, monkeypatch):
    """A checkpoint written before the path was recorded: the name, from the current directory."""
    path = moved / "runs" / "c.pt"
    state = torch.load(path, weights_only=True)
    del state["user_model"]["file"]
    torch.save(state, path)
    monkeypatch.chdir(moved)
    result = gnnmesh_in_process("predict", "--checkpoint", path, "--out", "p", "--quiet")
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(read("p").values, trained["before"].values, atol=1e-5)


def _resume(moved, *extra):
    return gnnmesh_in_process("train", "--dataset", DATASET, "--epochs", "3", "--checkpoint",
                              moved / "runs" / "c.pt", "--resume", "--quiet", *extra)


def test_a_moved_checkpoint_resumes_from_another_directory(moved):
    result = _resume(moved, "--model", f"{moved / 'models' / 'net.py'}:GraphConv", "--model-args", "hidden=8")
    assert result.returncode == 0, result.stderr
    state = torch.load(moved / "runs" / "c.pt", weights_only=True)
    assert state["epoch"] == 3 and state["user_model"]["file"] == "../models/net.py"


def test_resuming_with_other_model_args_is_still_its_one_line(moved):
    result = _resume(moved, "--model", f"{moved / 'models' / 'net.py'}:GraphConv", "--model-args", "hidden=16")
    one_error_line(result, "checkpoint was written with different settings: model_args ('hidden=8' in the "
                   "checkpoint, 'hidden=16' now)")


def test_resuming_with_a_changed_file_is_one_line(moved):
    source = moved / "models" / "net.py"
    source.write_text(source.read_text() + "\n# changed\n")
    result = _resume(moved, "--model", f"{source}:GraphConv", "--model-args", "hidden=8")
    one_error_line(result, f"--model {source}:GraphConv: its file {source} is not the one the model was trained "
                   "from: it changed since training")


def test_resuming_without_model_says_where_the_file_is(moved):
    one_error_line(_resume(moved), "the checkpoint holds your own model models/net.py:GraphConv; give it with "
                   f"--model {moved / 'models' / 'net.py'}:GraphConv")


def test_export_finds_the_file_of_a_moved_checkpoint(moved):
    result = gnnmesh_in_process("export", "--checkpoint", moved / "runs" / "c.pt", "--to", "pyg", "--out", "e")
    assert result.returncode == 0, result.stderr
    assert Path("e/net.py").read_text() == (moved / "models" / "net.py").read_text()


def test_a_checkpoint_without_a_path_of_its_own_looks_up_the_name_alone(trained):
    state = torch.load(trained["project"] / "runs" / "c.pt", weights_only=True)
    with pytest.raises(ConfigError, match=r"in none of the places looked in \(models/net.py\)"):
        user_file.resolve(None, state)


def test_the_path_is_recorded_relative_to_where_the_checkpoint_is_written(tmp_path):
    trained = user_file.Trained("net.py:Net", tmp_path / "src" / "net.py", "a" * 64)

    def recorded(path):
        return checkpoint.user_model_file({"user_model": trained.record(path)})
    assert recorded(tmp_path / "runs" / "a" / "c.pt") == "../../src/net.py"
    assert recorded(tmp_path / "src" / "c.pt") == "net.py"
    assert recorded(None) is None


def test_a_given_file_that_is_not_there_is_one_line(moved):
    result = gnnmesh_in_process("predict", "--checkpoint", moved / "runs" / "c.pt", "--out", "p",
                                "--model", "nowhere/net.py:GraphConv")
    one_error_line(result, "--model nowhere/net.py:GraphConv: nowhere/net.py: no such file")
