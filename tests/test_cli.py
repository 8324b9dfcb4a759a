"""The command line, run as a user would: a subprocess, its output and exit status."""

import json
import subprocess
import sys

import pytest

from tests.helpers import gnnmesh, gnnmesh_in_process, one_error_line


@pytest.mark.slow
def test_train_cora_reaches_accuracy(data_root, tmp_path):
    metrics = tmp_path / "m.jsonl"
    # one thread: on a busy 2-core machine torch's two spin-waiting threads ran ~20x slower
    result = gnnmesh("train", "--dataset", "cora", "--model", "gcn", "--epochs", "200",
                     "--threads", "1", "--metrics", str(metrics), data_root=data_root)
    assert result.returncode == 0, result.stderr
    assert "epoch  200" in result.stdout and "done:" in result.stdout
    assert "memory: peak" in result.stdout and "; peak memory" in result.stdout.split("done:")[1]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, 201))
    assert {"loss", "train_acc", "val_acc", "test_acc", "epoch_time", "aggregate_time",
            "dense_time", "other_time", "rank_peak_rss_mib", "peak_rss_mib_max"} <= set(records[0])
    test_acc = float(result.stdout.split("test ")[-1].split(",")[0])
    assert test_acc >= 0.80


def test_print_config_resolves_model_defaults(tmp_path):
    result = gnnmesh_in_process("train", "--model", "gat", "--epochs", "5", "--print-config")
    assert result.returncode == 0
    assert '[model]\nname = "gat"' in result.stdout and "hidden = 8" in result.stdout
    assert "lr = 0.005" in result.stdout and "epochs = 5" in result.stdout
    # what --print-config prints loads back as a config, and flags override it
    path = tmp_path / "run.toml"
    path.write_text(result.stdout)
    again = gnnmesh_in_process("train", "--config", str(path), "--lr", "0.1", "--print-config")
    assert "lr = 0.1" in again.stdout and "hidden = 8" in again.stdout
    assert again.stderr == ""  # one table per section: no note about the older flat form


def test_a_flat_config_file_still_trains_with_one_note(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text('[model]\nmodel = "sage"\n[train]\nepochs = 2\n[run]\nlog_every = 1\n')
    result = gnnmesh("train", "--config", str(path), "--dataset", "sbm:nodes=100,classes=2,features=4")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(notes) == 1 and "flat config form is deprecated" in notes[0] and "--print-config" in notes[0]


def test_bad_flag_values_exit_2():
    one_error_line(gnnmesh_in_process("train", "--epochs", "ten"), "--epochs")
    one_error_line(gnnmesh_in_process("train", "--model", "gcnn"), "config field 'model': 'gcnn' is not one of gcn")
    one_error_line(gnnmesh_in_process("train", "--dropout", "2", "--print-config"), "dropout")


def test_bad_config_file_exits_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("epochs = 'many'\n")
    one_error_line(gnnmesh_in_process("train", "--config", str(path)), "bad.toml", "epochs")


def test_unknown_dataset_lists_known_ones(data_root):
    one_error_line(gnnmesh_in_process("train", "--dataset", "coraa", env={"GNNMESH_DATA": str(data_root)}),
                   "coraa", "cora", "citeseer")


def test_malformed_graph_file_names_line(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("# a comment\n0 1\n1 2\n2 x\n")
    one_error_line(gnnmesh_in_process("train", "--dataset", str(path)), "edges.txt", "line 4")


@pytest.mark.slow
def test_resume_from_cli(tmp_path):
    ckpt = tmp_path / "c.pt"
    common = ["train", "--dataset", "sbm:nodes=300,classes=3,features=8", "--quiet"]
    first = gnnmesh(*common, "--epochs", "4", "--checkpoint", str(ckpt))
    assert first.returncode == 0, first.stderr
    resumed = gnnmesh(*common, "--epochs", "8", "--checkpoint", str(ckpt), "--resume")
    full = gnnmesh(*common, "--epochs", "8")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split("epochs in")[0] == full.stdout.split("epochs in")[0]
    results = [r.stdout.split("/epoch); ")[1].split("; peak memory")[0] for r in (resumed, full)]
    assert results[0] == results[1]  # peak memory is the process's own, not a result
    assert "final loss" in full.stdout


def test_version():
    result = gnnmesh("--version")
    assert result.returncode == 0 and result.stdout.startswith("gnnmesh ")


def test_unwritable_metrics_path_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = gnnmesh_in_process("train", "--dataset", "sbm:nodes=100,classes=2,features=4", "--epochs", "1",
                                "--metrics", str(blocker / "m.jsonl"))
    one_error_line(result, "m.jsonl")


def test_unwritable_checkpoint_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = gnnmesh_in_process("train", "--dataset", "sbm:nodes=100,classes=2,features=4", "--epochs", "1",
                                "--checkpoint", str(blocker / "c.pt"))
    one_error_line(result, "c.pt", "checkpoint")
    assert "epoch" not in result.stdout


def test_unlabeled_edge_list_says_how_to_train_on_it(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{i} {(i * 7 + 3) % 40}\n" for i in range(40)))
    one_error_line(gnnmesh_in_process("train", "--dataset", str(edges), "--epochs", "1"),
                   "has no labels", ":random_labels=K", "field 'labels'")
    result = gnnmesh("train", "--dataset", f"{edges}:random_labels=3", "--epochs", "2", "--threads", "1")
    assert result.returncode == 0 and "done:" in result.stdout, result.stderr


def _diverging(tmp_path, *flags):
    """A run that diverges (a huge learning rate): one line naming the epoch, exit 2, and the
    checkpoint of the epoch before it left as it was."""
    import re
    import torch
    ckpt = tmp_path / "c.pt"
    result = gnnmesh("train", "--dataset", "sbm:nodes=200,classes=2,features=4", "--epochs", "10",
                     "--lr", "1e20", "--checkpoint", str(ckpt), "--checkpoint-every", "1", "--quiet", *flags,
                     timeout=240)
    one_error_line(result, "training diverged", "loss nan")
    epoch = int(re.search(r"error: epoch (\d+): training diverged", result.stderr).group(1))
    assert epoch >= 2 and torch.load(ckpt, weights_only=True)["epoch"] == epoch - 1
    assert "done:" not in result.stdout


def test_diverging_training_stops_with_one_line(tmp_path):
    _diverging(tmp_path)


@pytest.mark.slow
def test_diverging_training_stops_every_rank_alike(tmp_path):
    _diverging(tmp_path, "--nproc", "2", "--strategy", "partition", "--partitioner", "rp", "--threads", "1")


@pytest.mark.parametrize("flags, fragment", [
    (["--chunk-size", "8"], "'chunk_size' (--chunk-size) applies only to --strategy tensor; this run uses single"),
    (["--strategy", "partition", "--no-pipeline"], "'pipeline' (--no-pipeline) applies only to --strategy tensor"),
    (["--strategy", "tensor", "--blocks", "2"], "'blocks' (--blocks) applies only to --strategy grid3d"),
    (["--strategy", "tensor", "--no-permute"], "'permute' (--no-permute) applies only to --strategy grid3d"),
    (["--strategy", "partition", "--grid", "2,1,1"], "'grid' (--grid) applies only to --strategy grid3d"),
    (["--strategy", "grid3d", "--partitioner", "rp"], "'partitioner' (--partitioner) applies only to --strategy partition"),
    (["--epsilon", "0.1"], "'epsilon' (--epsilon) applies only to --strategy partition"),
    (["--strategy", "tensor", "--partition-file", "p.npy"], "'partition_file' (--partition-file) applies only"),
])
def test_a_flag_that_does_not_apply_is_one_line(flags, fragment):
    one_error_line(gnnmesh_in_process("train", "--dataset", "sbm:nodes=100,classes=2,features=4", "--epochs", "1",
                                      *flags), fragment)


@pytest.mark.slow
def test_a_flag_that_does_not_apply_to_the_parts_strategy_is_one_line(tmp_path):
    made = gnnmesh("partition", "--dataset", "sbm:nodes=100,classes=2,features=4", "--parts", "2",
                   "--method", "contiguous", "--write-parts", str(tmp_path / "p"))
    assert made.returncode == 0, made.stderr
    parts = ["train", "--parts", str(tmp_path / "p"), "--nproc", "2", "--epochs", "1", "--threads", "1"]
    # the strategy comes from the parts (partition): known only once they are opened
    one_error_line(gnnmesh(*parts, "--chunk-size", "8", timeout=240),
                   "'chunk_size' (--chunk-size) applies only to --strategy tensor; this run uses partition")
    one_error_line(gnnmesh(*parts, "--partitioner", "rp"), "'partitioner' (--partitioner) does not apply to --parts")


def test_a_list_value_may_start_with_a_minus():
    """'--fanouts -1,10' as the docs write it: a value, not an unknown option ("expected one
    argument"); so for every flag of every command (their parsers share the rule)."""
    result = gnnmesh_in_process("train", "--minibatch", "--fanouts", "-1,10", "--eval-fanouts", "-1,-1",
                                "--print-config")
    assert result.returncode == 0 and 'fanouts = "-1,10"' in result.stdout and '"-1,-1"' in result.stdout
    one_error_line(gnnmesh_in_process("train", "--class-weights", "-1,2,3"), "'class_weights': '-1,2,3'")
    one_error_line(gnnmesh_in_process("plan", "--nproc", "2", "--dataset", "cora", "--allow-sampling",
                                      "--fanouts", "-2,10"), "fanouts")


def test_the_command_line_sets_up_before_torch_is_imported():
    """``gnnmesh`` and ``gnnmesh.cli`` import without torch (seconds of import), so that the
    command line's signal handling is in place first; building the parser then imports it."""
    probe = ("import sys, gnnmesh, gnnmesh.cli; before = 'torch' in sys.modules; "
             "gnnmesh.cli.build_parser(); print(before, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]
