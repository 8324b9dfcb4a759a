"""``gnnmesh predict`` on the command line: what it writes, how it reads back, and bad input
as one line with exit status 2 and nothing written."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import gnnmesh
from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.predict import read, through_layer
from gnnmesh.predict import store as prediction_store
from gnnmesh.train import Trainer
from gnnmesh.train.trainer import input_features
from gnnmesh.view import GraphView

from tests.helpers import gnnmesh as run_cli, gnnmesh_in_process, one_error_line
from tests.system.test_untrusted_files import hostile_checkpoint

SBM = "sbm:nodes=300,classes=4,features=12,seed={}"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "c.pt"
    Trainer(Config.of(dataset=SBM.format(1), epochs=3, hidden=8, layers=3, checkpoint=str(path)),
            datasets.load(SBM.format(1))).fit()
    return path


def forward(path, spec=SBM.format(1), layer=None):
    """The loaded model's output (or ``layer``'s) on the graph ``spec``, as a notebook runs it."""
    model, _ = gnnmesh.load(path)
    graph = datasets.load(spec)
    run = model if layer is None else through_layer(model, layer)
    with torch.no_grad():
        return run(GraphView(graph.adj), input_features(graph)).numpy()


def predict(capsys, *args) -> tuple:
    status = main(["predict", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_every_node_read_back_in_id_order_equals_the_models_forward(checkpoint, tmp_path, capsys):
    status, out, _ = predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p")
    assert status == 0 and "wrote logits (300 x 4 float32) for all nodes" in out
    got = read(tmp_path / "p")
    assert np.array_equal(got.ids, np.arange(300))
    np.testing.assert_allclose(got.values, forward(checkpoint), rtol=0, atol=1e-6)
    manifest = json.loads((tmp_path / "p" / "manifest.json").read_text())
    assert manifest["graph"]["dataset"] == SBM.format(1) and len(manifest["graph"]["key"]) == 32
    assert manifest["checkpoint"]["epoch"] == got.manifest["checkpoint"]["epoch"] >= 1
    assert manifest["rows"] == 300 and manifest["width"] == 4 and manifest["layer"] == 3


def test_probabilities_labels_and_each_layers_embeddings(checkpoint, tmp_path, capsys):
    logits = forward(checkpoint)
    for name, flags in {"probs": ["--output", "probs"], "labels": ["--output", "labels"],
                        "hidden": ["--output", "embeddings"], "first": ["--output", "embeddings", "--layer", "1"],
                        "last": ["--output", "embeddings", "--layer", "3"]}.items():
        assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / name, *flags)[0] == 0
    probs = read(tmp_path / "probs").values
    np.testing.assert_allclose(probs, torch.softmax(torch.from_numpy(logits), -1).numpy(), atol=1e-6)
    assert np.array_equal(read(tmp_path / "labels").values, logits.argmax(1))
    hidden = read(tmp_path / "hidden")
    assert hidden.manifest["layer"] == 2 and hidden.values.shape == (300, 8)
    np.testing.assert_allclose(hidden.values, forward(checkpoint, layer=2), atol=1e-6)
    np.testing.assert_allclose(read(tmp_path / "first").values, forward(checkpoint, layer=1), atol=1e-6)
    np.testing.assert_allclose(read(tmp_path / "last").values, logits, atol=1e-6)


def test_chosen_nodes_a_split_or_a_file(checkpoint, tmp_path, capsys):
    graph = datasets.load(SBM.format(1))
    assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "test", "--nodes", "test")[0] == 0
    assert np.array_equal(read(tmp_path / "test").ids, torch.nonzero(graph.test_mask).flatten().numpy())
    listed = tmp_path / "ids.txt"
    listed.write_text("# nodes to score\n17\n3\n\n17  # again\n299\n")
    assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "file", "--nodes", listed)[0] == 0
    got = read(tmp_path / "file")
    assert np.array_equal(got.ids, [3, 17, 299])
    np.testing.assert_allclose(got.values, forward(checkpoint)[[3, 17, 299]], atol=1e-6)
    np.save(tmp_path / "ids.npy", np.array([5, 1]))
    assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "npy", "--nodes", tmp_path / "ids.npy")[0] == 0
    assert np.array_equal(read(tmp_path / "npy").ids, [1, 5])


def test_parquet_reads_back_as_npy_does(checkpoint, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    for fmt in ("npy", "parquet"):
        for output in ("logits", "labels"):
            assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / f"{fmt}-{output}",
                           "--format", fmt, "--output", output)[0] == 0
    for output in ("logits", "labels"):
        a, b = read(tmp_path / f"npy-{output}"), read(tmp_path / f"parquet-{output}")
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.values, b.values)
    assert (tmp_path / "parquet-logits" / "part-00000.parquet").is_file()


def test_an_earlier_prediction_is_replaced_whole(checkpoint, tmp_path, capsys):
    out = tmp_path / "p"
    assert predict(capsys, "--checkpoint", checkpoint, "--out", out, "--output", "labels")[0] == 0
    assert predict(capsys, "--checkpoint", checkpoint, "--out", out, "--nodes", "val")[0] == 0
    got = read(out)
    assert got.manifest["output"] == "logits" and got.manifest["nodes"] == "val"
    assert sorted(p.name for p in out.iterdir()) == ["ids-00000.npy", "manifest.json", "values-00000.npy"]


def test_a_renumbered_graph_gives_the_original_ids(checkpoint, tmp_path, capsys):
    assert predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p", "--reorder", "rcm")[0] == 0
    got = read(tmp_path / "p")
    assert np.array_equal(got.ids, np.arange(300))
    np.testing.assert_allclose(got.values, forward(checkpoint), atol=1e-5)


def test_another_graph_of_the_same_widths_is_noted(checkpoint, tmp_path, capsys):
    status, out, _ = predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p", "--dataset", SBM.format(2))
    assert status == 0 and "note: the model was trained on" in out and "inductive" in out
    np.testing.assert_allclose(read(tmp_path / "p").values, forward(checkpoint, SBM.format(2)), atol=1e-6)


def test_the_library_predicts_on_a_graph_without_labels(checkpoint):
    graph = datasets.load(SBM.format(1))
    bare = graph.replace(y=None, num_classes=None, train_mask=None, val_mask=None, test_mask=None)
    ids, values = Trainer.from_checkpoint(checkpoint, bare).predict()
    np.testing.assert_allclose(values, forward(checkpoint), atol=1e-6)
    with pytest.raises(ConfigError, match="ids must be 0 to 299"):
        Trainer.from_checkpoint(checkpoint, bare).predict(nodes=[4, 300])


BAD = {
    "id out of range": (["--nodes", "{ids}"], "5\n300\n", "ids.txt, line 2: node id 300 is out of range"),
    "not an id": (["--nodes", "{ids}"], "5\nfive\n", "ids.txt, line 2: 'five' is not a node id"),
    "no such nodes": (["--nodes", "everything"], None, "--nodes everything: neither all, train"),
    "id beyond int64": (["--nodes", "{ids}"], "5\n99999999999999999999999\n",
                        "ids.txt, line 2: node id 99999999999999999999999 is out of range"),
    "a mini-batch strategy": (["--strategy", "gdp"], None, "--strategy gdp trains mini-batches; predict runs the "
                                                         "model over the whole graph under any of single, partition"),
    "layer out of range": (["--output", "embeddings", "--layer", "4"], None, "--layer 4: the model has 3 layers"),
    "layer of logits": (["--layer", "1"], None, "--layer applies to --output embeddings only"),
    "another width": (["--dataset", "sbm:nodes=300,classes=4,features=10"], None,
                      "takes 12 input features, the graph has 10"),
    "other classes": (["--dataset", "sbm:nodes=300,classes=5,features=12"], None,
                      "predicts 4 classes, the graph has labels of 5"),
    "model the strategy cannot run": (["--strategy", "grid3d", "--nproc", "2", "--decoupled"], None, "--decoupled"),
}


@pytest.mark.parametrize("case", [c for c in BAD if c != "model the strategy cannot run"])
def test_bad_input_is_one_line_and_writes_nothing(checkpoint, tmp_path, capsys, case):
    flags, ids, message = BAD[case]
    if ids is not None:
        (tmp_path / "ids.txt").write_text(ids)
    flags = [f.format(ids=tmp_path / "ids.txt") for f in flags]
    status, _, err = predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p", *flags)
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "p").exists()
    assert [p.name for p in tmp_path.iterdir()] in ([], ["ids.txt"])  # no temporaries left either


def test_a_uint64_id_past_int64_is_named_as_it_is(tmp_path):
    """Checked before it becomes int64, where 2^64 - 1 would wrap into -1, another id's message."""
    from gnnmesh.predict.nodes import read_node_file
    np.save(tmp_path / "ids.npy", np.array([3, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(ConfigError, match="ids.npy, entry 1: node id 18446744073709551615 is out of range"):
        read_node_file(tmp_path / "ids.npy", 300)
    np.save(tmp_path / "ids.npy", np.array([7, 3, 7], dtype=np.uint64))
    assert read_node_file(tmp_path / "ids.npy", 300).tolist() == [3, 7]


def test_an_output_directory_holding_something_else_is_kept(checkpoint, tmp_path, capsys):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "notes.txt").write_text("mine")
    status, _, err = predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p")
    assert status == 2 and "exists and is not a prediction directory" in err
    assert [p.name for p in (tmp_path / "p").iterdir()] == ["notes.txt"]


def test_an_earlier_prediction_holding_the_users_files_is_kept(checkpoint, tmp_path, capsys):
    out = tmp_path / "p"
    assert predict(capsys, "--checkpoint", checkpoint, "--out", out)[0] == 0
    (out / "notes.txt").write_text("mine")
    status, _, err = predict(capsys, "--checkpoint", checkpoint, "--out", out, "--output", "labels")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"{out}: exists and is not a prediction directory (it also holds notes.txt, " in err
    assert (out / "notes.txt").read_text() == "mine" and read(out).manifest["output"] == "logits"


def no_temporaries(*folders) -> None:
    for folder in folders:
        left = [n for n in os.listdir(folder) if ".tmp-" in n or n.endswith(".lock")]  # "..tmp-*" too
        assert not left, (folder, left)


@pytest.mark.parametrize("earlier", [False, True])
def test_out_dot_is_refused_and_leaves_no_temporary(checkpoint, tmp_path, capsys, monkeypatch, earlier):
    """``--out .`` was staged inside the directory it replaces, whose rename then failed
    (EBUSY) and left a ``..tmp-*`` directory behind. Replacing the current directory would
    leave the shell in a removed one, so it is refused before any work."""
    here = tmp_path / "here"
    here.mkdir()
    if earlier:  # an earlier prediction, written by its path
        assert predict(capsys, "--checkpoint", checkpoint, "--out", here, "--quiet")[0] == 0
    before = {name: (here / name).read_bytes() for name in os.listdir(here)}
    monkeypatch.chdir(here)
    status, out, err = predict(capsys, "--checkpoint", checkpoint, "--out", ".")
    assert status == 2
    no_temporaries(here, tmp_path)
    assert {name: (here / name).read_bytes() for name in os.listdir(here)} == before
    assert out == "" and err.strip() == "gnnmesh: error: .: is the current directory or holds it, and a " \
                                        "prediction directory replaces its directory whole; choose another path"


def test_a_failed_prediction_leaves_no_temporary(checkpoint, tmp_path, capsys, monkeypatch):
    out = tmp_path / "p"
    assert predict(capsys, "--checkpoint", checkpoint, "--out", out, "--output", "labels", "--quiet")[0] == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    def full_disk(staged, *args):
        (staged / "ids-00000.npy").write_bytes(b"part")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(staged / "ids-00000.npy"))

    monkeypatch.setattr(prediction_store, "_write_part", full_disk)
    status, _, err = predict(capsys, "--checkpoint", checkpoint, "--out", out)
    assert status == 2 and err.strip() == f"gnnmesh: error: {out}: cannot write the prediction " \
                                          f"({os.strerror(errno.ENOSPC)})"
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    no_temporaries(out, tmp_path)


def test_a_prediction_directory_in_use_by_another_run_is_refused_before_loading(checkpoint, tmp_path):
    """Two runs given one --out both succeeded, and one's prediction was lost; now the second
    is refused, naming the first (a process holding the lock as a predict run does)."""
    out = tmp_path / "p"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from gnnmesh import locks; "
                               "locks.hold(sys.argv[1], 'prediction directory'); print('held', flush=True); "
                               "time.sleep(600)", str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        result = gnnmesh_in_process("predict", "--checkpoint", checkpoint, "--out", out)
        one_error_line(result, f"{out}: the prediction directory is in use by another run (pid {holder.pid} on host ")
        assert result.stdout == "" and not out.exists()
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()


def test_a_model_the_strategy_cannot_run_is_refused_naming_the_checkpoint(tmp_path, capsys):
    path = tmp_path / "gat.pt"
    Trainer(Config.of(dataset=SBM.format(1), model="gat", epochs=1, checkpoint=str(path)),
            datasets.load(SBM.format(1))).fit()
    status, _, err = predict(capsys, "--checkpoint", path, "--out", tmp_path / "p", "--strategy", "grid3d",
                             "--nproc", "2")
    assert status == 2 and "gat.pt: the model it holds: " in err and "grid3d" in err, err
    assert not (tmp_path / "p").exists()


def test_damaged_and_hostile_checkpoints_run_nothing_and_write_nothing(checkpoint, tmp_path, capsys):
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(checkpoint.read_bytes()[:1000])
    status, _, err = predict(capsys, "--checkpoint", damaged, "--out", tmp_path / "p")
    assert status == 2 and "damaged.pt: unreadable checkpoint" in err
    marker = tmp_path / "ran"
    hostile = hostile_checkpoint(tmp_path / "hostile.pt", marker)
    status, _, err = predict(capsys, "--checkpoint", hostile, "--out", tmp_path / "p")
    assert status == 2 and "refused without running it" in err and not marker.exists()
    assert not (tmp_path / "p").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_train_on_three_ranks_then_predict_on_two_from_the_command_line(tmp_path):
    """The two commands a user types: partition x3 training, tensor x2 prediction."""
    spec, ckpt = SBM.format(3), tmp_path / "c.pt"
    trained = run_cli("train", "--dataset", spec, "--nproc", "3", "--strategy", "partition", "--partitioner", "rp",
                      "--epochs", "3", "--checkpoint", ckpt, timeout=240)
    assert trained.returncode == 0, trained.stderr
    result = run_cli("predict", "--checkpoint", ckpt, "--nproc", "2", "--strategy", "tensor", "--out",
                     tmp_path / "preds", timeout=240)
    assert result.returncode == 0, result.stderr
    got = read(tmp_path / "preds")
    assert len(got.manifest["shards"]) == 2 and np.array_equal(got.ids, np.arange(300))
    np.testing.assert_allclose(got.values, forward(ckpt, spec), atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_predict_from_parts_on_two_ranks(checkpoint, tmp_path):
    parts = run_cli("partition", "--dataset", SBM.format(1), "--nparts", "2", "--partitioner", "rp",
                    "--write-parts", tmp_path / "parts", timeout=240)
    assert parts.returncode == 0, parts.stderr
    result = run_cli("predict", "--checkpoint", checkpoint, "--parts", tmp_path / "parts", "--nproc", "2",
                     "--out", tmp_path / "p", "--output", "embeddings", timeout=240)
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(read(tmp_path / "p").values, forward(checkpoint, layer=2), atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_bad_node_file_under_several_ranks_is_one_line(checkpoint, tmp_path):
    (tmp_path / "ids.txt").write_text("1\n-4\n")
    one_error_line(run_cli("predict", "--checkpoint", checkpoint, "--out", tmp_path / "p", "--nproc", "2",
                           "--strategy", "partition", "--partitioner", "rp", "--nodes", tmp_path / "ids.txt"),
                   "ids.txt, line 2: node id -4 is out of range")
    assert not (tmp_path / "p").exists()


def test_strategy_auto_ranks_the_strategies_for_one_inference_pass(checkpoint, tmp_path, capsys):
    status, out, _ = predict(capsys, "--checkpoint", checkpoint, "--out", tmp_path / "p", "--strategy", "auto",
                             "--device-memory", "64MiB")
    assert status == 0, out
    assert "by the predicted time of one inference pass" in out and "ms/pass" in out
    np.testing.assert_allclose(read(tmp_path / "p").values, forward(checkpoint), atol=1e-5)


# -- a flag given is never ignored, whatever its value ---------------------------------------------

@pytest.fixture(scope="module")
def one_part(tmp_path_factory):
    """Parts of an SBM graph for one rank, and a checkpoint trained from them."""
    from tests.helpers import gnnmesh_in_process
    where = tmp_path_factory.mktemp("one-part")
    assert gnnmesh_in_process("partition", "--dataset", SBM.format(1), "--nparts", "1", "--write-parts",
                              where / "parts").returncode == 0
    config = Config.of(dataset=SBM.format(1), epochs=2, checkpoint=str(where / "c.pt"))
    Trainer(config, datasets.load(SBM.format(1))).fit()
    return where / "parts", where / "c.pt"


@pytest.mark.parametrize("command", ["train", "predict"])
def test_dataset_beside_parts_is_checked_even_when_it_is_the_default(one_part, tmp_path, command):
    from tests.helpers import gnnmesh_in_process
    parts, path = one_part
    args = ["--epochs", "1"] if command == "train" else ["--checkpoint", path, "--out", tmp_path / "p"]
    for given in (["--dataset", "cora"], ["--config", _config_naming(tmp_path, "cora")]):
        one_error_line(gnnmesh_in_process(command, "--parts", parts, *given, *args),
                       f"these parts hold dataset '{SBM.format(1)}', not 'cora'")
    assert not (tmp_path / "p").exists()


def _config_naming(tmp_path, dataset) -> str:
    path = tmp_path / "run.toml"
    path.write_text(f'[data]\ndataset = "{dataset}"\n')
    return str(path)


def test_a_model_trained_on_the_default_dataset_notes_another_graph(tmp_path):
    from tests.helpers import gnnmesh_in_process
    path = tmp_path / "c.pt"
    assert gnnmesh_in_process("train", "--epochs", "1", "--checkpoint", path, "--quiet").returncode == 0  # cora
    other = "sbm:nodes=300,classes=7,features=1433"
    result = gnnmesh_in_process("predict", "--checkpoint", path, "--dataset", other, "--out", tmp_path / "p")
    assert result.returncode == 0, result.stderr
    assert f"note: the model was trained on 'cora'; predicting on '{other}'" in result.stdout


def test_a_graph_given_in_python_is_what_the_checkpoint_records(checkpoint, tmp_path):
    path = tmp_path / "c.pt"
    graph = datasets.load(SBM.format(2))
    Trainer(Config.of(epochs=1, checkpoint=str(path)), graph).fit()  # no dataset setting: not cora
    assert torch.load(path, weights_only=True)["config"]["dataset"] == graph.name
