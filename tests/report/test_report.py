"""``gnnmesh report`` and ``gnnmesh plan --json``, run as a user would: real short trainings
write the metrics files, the report is a subprocess, and its PNGs are read back byte by byte."""

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gnnmesh.report import figures
from gnnmesh.report.plan_file import read_plan

from tests.helpers import gnnmesh_in_process
from tests.forked import run_cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PICTURES = figures.FILES
TRAIN = ("train", "--dataset", "cora", "--epochs", "3", "--threads", "1", "--quiet")


def gnnmesh(*args, env=None, timeout=240):
    return run_cli(*args, timeout=timeout, env={**os.environ, **(env or {})})


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def one_error_line(result, *fragments):
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gnnmesh: error:"), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def png_size(path: Path) -> tuple:
    """(width, height) from a PNG's header; AssertionError unless it is a PNG."""
    head = path.read_bytes()[:33]
    assert len(head) == 33 and head[:8] == PNG_SIGNATURE, f"{path}: not a PNG"
    length, kind = struct.unpack(">I4s", head[8:16])
    assert kind == b"IHDR" and length == 13, f"{path}: no IHDR chunk first"
    return struct.unpack(">II", head[16:24])


def snapshot(directory: Path):
    """Every entry under ``directory`` with its content (None: no such directory): what a
    failed report must not change."""
    if not directory.exists():
        return None
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None
            for p in sorted(directory.rglob("*"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Metrics files of real runs: one process, 2 ranks under 1D partitioning, 2 ranks of
    grid3d on the 2x1x1 grid (its records name the candidate, "grid3d 2x1x1"), and a grid3d
    plan for 2 ranks."""
    root = tmp_path_factory.mktemp("runs")
    ok(gnnmesh(*TRAIN, "--metrics", root / "single.jsonl"))
    ok(gnnmesh(*TRAIN, "--nproc", "2", "--strategy", "partition", "--partitioner", "rp",
               "--metrics", root / "partition.jsonl"))
    ok(gnnmesh(*TRAIN, "--nproc", "2", "--strategy", "grid3d", "--grid", "2,1,1",
               "--metrics", root / "2x1x1.jsonl"))
    ok(gnnmesh("plan", "--strategy", "grid3d", "--nproc", "2", "--dataset", "cora", "--json", root / "plan.json"))
    return root


def records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def table(report: Path, section: str, key: int) -> dict:
    """The rows (lists of cells) of the first markdown table after ``section``, keyed by
    their cell ``key``."""
    lines = report.read_text().split(section, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.split("|")[1:-1]])
    return {row[key]: row for row in rows[2:]}  # past the header and its rule


RUNS, PLAN = "# Training report", "## Plan:"


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_report_draws_every_picture_of_real_runs(runs, tmp_path):
    out = tmp_path / "report"
    result = ok(gnnmesh("report", runs / "single.jsonl", runs / "partition.jsonl", runs / "2x1x1.jsonl",
                        "--plan", runs / "plan.json", "--out", out))
    assert sorted(p.name for p in out.iterdir()) == sorted(PICTURES + ("report.md",))
    for name in PICTURES:
        assert png_size(out / name) == figures.SIZE == (800, 450), name
        assert name in result.stdout
    text = (out / "report.md").read_text()
    assert sorted(table(out / "report.md", RUNS, 0)) == ["2x1x1", "partition", "single"]
    for name in PICTURES:
        assert f"]({name})" in text
    assert "Not drawn" not in text


@pytest.mark.slow  # real runs of several ranks (the fixture 'runs')
@pytest.mark.timeout(600)
def test_summary_rows_agree_with_the_records(runs, tmp_path):
    out = tmp_path / "report"
    ok(gnnmesh("report", runs / "single.jsonl", runs / "partition.jsonl", "--out", out))
    rows = table(out / "report.md", RUNS, 0)
    for label in ("single", "partition"):
        last = records(runs / f"{label}.jsonl")[-1]
        _, _, epochs, loss, best, test, _, moved = rows[label]
        assert epochs == "3" and loss == f"{last['loss']:.4f}"
        # the best epoch the trainer itself recorded, and the test accuracy it reports for it
        best_record = records(runs / f"{label}.jsonl")[last["best_epoch"] - 1]
        assert best == f"{last['best_val_acc']:.4f} ({last['best_epoch']})" and test == f"{best_record['test_acc']:.4f}"
    assert rows["single"][-1] == "-" and rows["partition"][-1].endswith("MiB")


@pytest.mark.slow  # real runs of several ranks (the fixture 'runs')
@pytest.mark.timeout(600)
def test_plan_file_ranks_every_grid_and_matches_the_measured_bytes(runs, tmp_path):
    plan = json.loads((runs / "plan.json").read_text())
    assert plan["strategy"] == "grid3d" and set(plan) == {"strategy", "candidates"}
    names = [c["name"] for c in plan["candidates"]]
    assert sorted(names) == ["grid3d 1x1x2", "grid3d 1x2x1", "grid3d 2x1x1"]
    times = [c["predicted_epoch_s"] for c in plan["candidates"]]
    assert times == sorted(times) and all(isinstance(t, float) and t > 0 for t in times)
    for c in plan["candidates"]:
        assert set(c) == {"name", "predicted_epoch_s", "bytes_per_rank", "peak_memory_bytes", "dominant"}
        assert isinstance(c["bytes_per_rank"], int) and c["peak_memory_bytes"] is None and isinstance(c["dominant"], str)
    # the model's bytes per rank are what the 2x1x1 run's counters saw (to padding)
    predicted = next(c for c in plan["candidates"] if c["name"] == "grid3d 2x1x1")["bytes_per_rank"]
    measured = records(runs / "2x1x1.jsonl")[-1]["bytes_total"] / 2
    assert abs(predicted - measured) <= 0.01 * measured
    # the report puts the run beside the candidate its records name
    out = tmp_path / "report"
    ok(gnnmesh("report", runs / "2x1x1.jsonl", runs / "single.jsonl", "--plan", runs / "plan.json", "--out", out))
    rows = table(out / "report.md", PLAN, 1)  # rank, candidate, predicted, measured, runs, ...
    assert [rows[name][0] for name in names] == ["1", "2", "3"]
    assert rows["grid3d 2x1x1"][3].endswith("ms") and rows["grid3d 2x1x1"][4] == "2x1x1"
    assert rows["grid3d 1x2x1"][3:5] == rows["grid3d 1x1x2"][3:5] == ["-", "-"]
    assert png_size(out / "plan.png") == figures.SIZE


@pytest.mark.slow  # real runs of several ranks (the fixture 'runs')
@pytest.mark.timeout(600)
def test_a_candidate_field_in_the_records_names_the_candidate(runs, tmp_path):
    named = tmp_path / "whatever.jsonl"
    named.write_text("".join(json.dumps({**r, "candidate": "grid3d 1x1x2"}) + "\n" for r in records(runs / "single.jsonl")))
    out = tmp_path / "report"
    ok(gnnmesh("report", named, "--plan", runs / "plan.json", "--out", out))
    assert table(out / "report.md", PLAN, 1)["grid3d 1x1x2"][4] == "whatever"


@pytest.mark.slow  # real runs of several ranks (the fixture 'runs')
@pytest.mark.timeout(600)
def test_a_single_process_run_skips_the_pictures_it_has_no_data_for(runs, tmp_path):
    out = tmp_path / "report"
    result = ok(gnnmesh("report", runs / "single.jsonl", "--out", out))
    assert sorted(p.name for p in out.iterdir()) == ["accuracy.png", "loss.png", "report.md"]
    for name in ("loss.png", "accuracy.png"):
        assert png_size(out / name) == figures.SIZE
    text = (out / "report.md").read_text()
    assert "](loss.png)" in text and "](accuracy.png)" in text
    for name in ("ranks.png", "bytes.png", "plan.png"):
        assert f"]({name})" not in text
        assert f"{name}" in result.stdout and "not drawn" in result.stdout.split(name, 1)[1].splitlines()[0]
    assert text.count("Not drawn:") == 3


@pytest.mark.timeout(300)
def test_offload_plan_file_has_bytes_and_memory_but_no_time(tmp_path):
    path = tmp_path / "offload.json"
    ok(gnnmesh("plan", "--strategy", "offload", "--dataset", "cora", "--device-memory", "64MiB", "--json", path))
    plan = read_plan(path)
    assert plan.strategy == "offload" and len(plan.candidates) == 1
    (c,) = plan.candidates
    assert c.predicted_epoch_s is None and c.bytes_per_rank > 0 and 0 < c.peak_memory_bytes <= 64 * 2**20
    metrics = tmp_path / "offload.jsonl"  # a run the report matches by its file name
    metrics.write_text(json.dumps({"epoch": 1, "loss": 1.9, "epoch_time": 0.5}) + "\n")
    out = tmp_path / "report"
    result = ok(gnnmesh("report", metrics, "--plan", path, "--out", out))
    assert not (out / "plan.png").exists() and "predicts no epoch times" in result.stdout
    row = table(out / "report.md", PLAN, 1)["offload"]
    assert row[2:7] == ["-", "500 ms", "offload", _mib(c.bytes_per_rank), _mib(c.peak_memory_bytes)]


@pytest.mark.timeout(300)
def test_plan_json_to_an_unwritable_path_fails_before_planning(tmp_path):
    (tmp_path / "file").write_text("")
    one_error_line(gnnmesh("plan", "--nproc", "2", "--nodes", "100", "--edges", "400",
                           "--json", tmp_path / "file" / "plan.json"), "plan.json")


def _mib(value: int) -> str:
    return f"{value / 2**20:.2f} MiB"


GOOD = json.dumps({"epoch": 1, "loss": 1.5, "val_acc": 0.5, "epoch_time": 0.1}) + "\n"
BAD_RUNS = {
    "garbage line": (GOOD + "this is not json\n" + GOOD.replace('"epoch": 1', '"epoch": 2'), "line 2"),
    "wrong field type": (GOOD + json.dumps({"epoch": 2, "loss": "low"}) + "\n", "line 2: field 'loss'"),
    "rank list of strings": (json.dumps({"epoch": 1, "rank_comm_time": ["a", "b"]}) + "\n", "rank_comm_time"),
    "no epoch": (json.dumps({"loss": 1.0}) + "\n", "line 1"),
    "epochs out of order": (GOOD + GOOD, "line 2: epoch 1 after epoch 1"),
    "not an object": ("[1, 2, 3]\n", "line 1"),
    "empty": ("", "no metrics records"),
    "binary": (None, "not UTF-8"),
    "restart without an epoch": (GOOD + json.dumps({"restart": 1}) + "\n", "line 2: not a restart record"),
}
BAD_PLANS = {
    "foreign (a rates file)": ({"compute": {}, "network": {}}, "not a plan file"),
    "wrong field type": ({"strategy": "grid3d", "candidates": [
        {"name": "1x1x2", "predicted_epoch_s": "fast", "bytes_per_rank": 1, "peak_memory_bytes": None,
         "dominant": None}]}, "candidates[0].predicted_epoch_s"),
    "missing field": ({"strategy": "grid3d", "candidates": [{"name": "1x1x2"}]}, "candidates[0]: field"),
    "bytes not an integer": ({"strategy": "grid3d", "candidates": [
        {"name": "a", "predicted_epoch_s": 1.0, "bytes_per_rank": 1.5, "peak_memory_bytes": None,
         "dominant": None}]}, "candidates[0].bytes_per_rank"),
    "no candidates": ({"strategy": "grid3d", "candidates": []}, "'candidates'"),
    "not JSON": ("{oops", "not JSON"),
}


@pytest.fixture(scope="module")
def earlier_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("earlier")
    (root / "good.jsonl").write_text(GOOD)
    ok(gnnmesh("report", root / "good.jsonl", "--out", root / "report"))
    return root / "report"


def _bad_input_leaves_out_alone(tmp_path, earlier_report, args, *fragments):
    """The report fails with one line and changes nothing: neither a directory it would have
    created nor one holding an earlier report, nor their parent (no temporary left)."""
    earlier = tmp_path / "earlier"
    shutil.copytree(earlier_report, earlier)
    for out in (tmp_path / "fresh", earlier):
        before, parent = snapshot(out), sorted(os.listdir(tmp_path))
        one_error_line(gnnmesh_in_process("report", *args, "--out", out), *fragments)
        assert snapshot(out) == before and sorted(os.listdir(tmp_path)) == parent


# Three kinds of damage in the fast suite, the rest among the slow tests (each runs the command).
FAST_BAD_RUNS = ("garbage line", "binary", "wrong field type")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", [c if c in FAST_BAD_RUNS else pytest.param(c, marks=pytest.mark.slow)
                                  for c in sorted(BAD_RUNS)])
def test_a_bad_metrics_file_is_one_line_and_writes_nothing(tmp_path, earlier_report, case):
    content, fragment = BAD_RUNS[case]
    path = tmp_path / "bad.jsonl"
    if content is None:
        path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    else:
        path.write_text(content)
    _bad_input_leaves_out_alone(tmp_path, earlier_report, [path], str(path), fragment)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", [case if case == "wrong field type" else pytest.param(case, marks=pytest.mark.slow)
                                  for case in sorted(BAD_PLANS)])  # one fast, for the suite's time
def test_a_bad_plan_file_is_one_line_and_writes_nothing(tmp_path, earlier_report, case):
    content, fragment = BAD_PLANS[case]
    plan = tmp_path / "plan.json"
    plan.write_text(content if isinstance(content, str) else json.dumps(content))
    run = tmp_path / "run.jsonl"
    run.write_text(GOOD)
    _bad_input_leaves_out_alone(tmp_path, earlier_report, [run, "--plan", plan], str(plan), fragment)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("what", ["run", "plan"])
def test_a_missing_file_is_one_line_and_writes_nothing(tmp_path, earlier_report, what):
    run = tmp_path / "run.jsonl"
    run.write_text(GOOD)
    missing = tmp_path / "missing.json"
    args = [missing] if what == "run" else [run, "--plan", missing]
    _bad_input_leaves_out_alone(tmp_path, earlier_report, args, str(missing), "No such file")


@pytest.mark.timeout(300)
def test_a_torn_last_line_is_dropped_with_a_warning(tmp_path):
    run = tmp_path / "live.jsonl"
    run.write_text(GOOD + GOOD.replace('"epoch": 1', '"epoch": 2') + '{"epoch": 3, "lo')  # a run still writing
    out = tmp_path / "report"
    result = ok(gnnmesh("report", run, "--out", out))
    assert "torn last line" in result.stderr
    assert table(out / "report.md", RUNS, 0)["live"][2] == "2"  # epochs


@pytest.mark.timeout(300)
def test_refuses_to_replace_a_directory_holding_other_files(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text(GOOD)
    # the metrics file itself inside --out: replacing the directory would delete it
    one_error_line(gnnmesh("report", run, "--out", tmp_path), str(tmp_path), "run.jsonl")
    assert run.read_text() == GOOD
    a_file = tmp_path / "report.md.txt"
    a_file.write_text("")
    one_error_line(gnnmesh("report", run, "--out", a_file), "not a directory")


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_a_second_report_replaces_the_first_whole(tmp_path):
    two_ranks = tmp_path / "ranks.jsonl"
    two_ranks.write_text(json.dumps({"epoch": 1, "loss": 1.0, "rank_comm_time": [0.1, 0.2],
                                     "halo_bytes": 100, "halo_messages": 2, "bytes_total": 100}) + "\n")
    out = tmp_path / "report"
    ok(gnnmesh("report", two_ranks, "--out", out))
    assert (out / "ranks.png").exists() and (out / "bytes.png").exists()
    one = tmp_path / "one.jsonl"
    one.write_text(GOOD)
    ok(gnnmesh("report", one, "--out", out))  # no stale pictures of the earlier report
    assert sorted(p.name for p in out.iterdir()) == ["accuracy.png", "loss.png", "report.md"]


@pytest.mark.timeout(300)
def test_without_matplotlib_one_line_names_the_extra(tmp_path):
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    run = tmp_path / "run.jsonl"
    run.write_text(GOOD)
    out = tmp_path / "report"
    result = gnnmesh("report", run, "--out", out, env={"PYTHONPATH": str(shim.parent)})
    one_error_line(result, 'pip install "gnnmesh[plot]"')
    assert not out.exists()
    # the library and the command line load without it
    code = ("import sys, gnnmesh.report, gnnmesh.commands.report, gnnmesh.cli; "
            "gnnmesh.cli.build_parser(); assert 'matplotlib' not in sys.modules")
    env = {**os.environ, "PYTHONPATH": str(shim.parent)}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


@pytest.mark.timeout(60)
def test_the_png_check_can_fail(tmp_path):
    """png_size rejects what is not a PNG and reads a PNG's real size."""
    fake = tmp_path / "fake.png"
    fake.write_bytes(b"GIF89a" + bytes(40))
    with pytest.raises(AssertionError):
        png_size(fake)
    header = PNG_SIGNATURE + struct.pack(">I4sII", 13, b"IHDR", 640, 480) + bytes(9)
    fake.write_bytes(header)
    assert png_size(fake) == (640, 480) != figures.SIZE


def test_a_restart_record_is_read_apart_from_the_epochs(tmp_path):
    """A job that lost a rank writes a restart record between the checkpoint's epoch and the
    next (the same epoch number): the epochs read on around it, and the run keeps it."""
    from gnnmesh.report.runs import read_run
    second = GOOD.replace('"epoch": 1', '"epoch": 2')
    restart = {"restart": 1, "epoch": 1, "ranks": 2, "failed": "rank 2 died of SIGKILL", "checkpoint": "c.pt"}
    path = tmp_path / "job.jsonl"
    path.write_text(GOOD + json.dumps(restart) + "\n" + second)
    run = read_run(path)
    assert run.epochs == [1, 2] and run.restarts == [restart]
