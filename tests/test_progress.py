"""Phase and elapsed time of long work on stderr: plain lines, a terminal line, silence."""

import io
import os
import re
import threading
import time

import pytest

from gnnmesh import datasets, progress
from tests.forked import run_cli


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def quiet_afterwards():
    yield
    progress.disable()


def test_plain_lines_say_when_a_phase_starts_and_ends_with_its_time():
    out = io.StringIO()
    progress.enable(out, delay=0)
    with progress.phase("generating a graph", total=10) as shown:
        shown.advance(4)
        shown.advance(6)
    assert out.getvalue().splitlines() == ["gnnmesh: generating a graph ...",
                                           f"gnnmesh: generating a graph: done in {0.0:.1f} s"]


def test_plain_lines_of_a_long_phase_come_every_heartbeat_and_nest():
    out = io.StringIO()
    progress.enable(out, delay=0, heartbeat=0)
    with progress.phase("partitioning"):
        with progress.phase("drawing edges", total=4) as shown:
            shown.advance(2)
    lines = out.getvalue().splitlines()
    assert lines[0] == "gnnmesh: partitioning ..."
    assert lines[1] == "gnnmesh:   drawing edges ..."
    assert re.fullmatch(r"gnnmesh:   drawing edges: 50% after \d+ s", lines[2]), lines
    assert lines[-2] == "gnnmesh:   drawing edges: done in 0.0 s"
    assert lines[-1] == "gnnmesh: partitioning: done in 0.0 s"


def test_a_terminal_gets_one_redrawn_line_with_a_bar_and_percentage():
    out = Terminal()
    progress.enable(out, delay=0, refresh=0)
    with progress.phase("writing parts", total=4) as shown:
        for _ in range(4):
            shown.advance()
    text = out.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1  # one line, redrawn in place
    draws = [d.replace("\x1b[K", "") for d in text.rstrip("\n").split("\r")[1:]]
    percentages = [re.search(r"(\d+)%", d).group(1) for d in draws]
    assert [p for k, p in enumerate(percentages) if k == 0 or p != percentages[k - 1]] == ["0", "25", "50", "75", "100"]
    assert draws[2].startswith("writing parts  [##########..........]  50%  0.0 s")
    assert draws[-1].endswith("done in 0.0 s")


def test_a_phase_without_total_or_advances_still_ticks_and_its_thread_ends_with_it():
    out = Terminal()
    progress.enable(out, delay=0.05, refresh=0.02)
    before = threading.active_count()
    with progress.phase("METIS") as shown:
        time.sleep(0.3)  # no advances: the phase's own thread shows it
        ticker = shown._ticker
        assert ticker.daemon and ticker.is_alive()
    assert not ticker.is_alive() and threading.active_count() == before
    draws = out.getvalue().split("\r")[1:]
    assert len(draws) >= 3 and "%" not in out.getvalue()
    assert draws[-1].startswith("METIS  done in 0.") and out.getvalue().endswith("\n")


def test_short_phases_print_nothing():
    for out in (io.StringIO(), Terminal()):
        progress.enable(out, delay=10)
        with progress.phase("quick", total=3) as shown:
            shown.advance(3)
        assert out.getvalue() == ""


def test_a_failed_phase_leaves_its_line_for_the_error_that_follows():
    for out, expected in ((io.StringIO(), "gnnmesh: parsing ...\n"), (Terminal(), "\rparsing  0.0 s\x1b[K\n")):
        progress.enable(out, delay=0)
        with pytest.raises(ValueError):
            with progress.phase("parsing"):
                raise ValueError("bad line")
        assert out.getvalue() == expected


def test_nothing_is_printed_unless_enabled(capsys):
    graph = datasets.load("sbm:nodes=200,classes=2,features=4,cache=false")
    assert graph.num_nodes == 200
    assert capsys.readouterr() == ("", "")
    assert not progress.enabled()


def test_the_environment_sets_the_delay_or_turns_reports_off(monkeypatch):
    for text, delay in (("", progress.DELAY_S), ("0", 0.0), ("2.5", 2.5), ("off", None), ("soon", progress.DELAY_S)):
        monkeypatch.setenv(progress.ENV, text)
        assert progress.delay_from_env() == delay
    monkeypatch.setenv(progress.ENV, "off")
    progress.enable(io.StringIO())
    assert not progress.enabled()


def gnnmesh(*args, tmp_path):
    env = {**os.environ, progress.ENV: "0", "GNNMESH_CACHE": str(tmp_path / "cache")}  # every phase shows
    return run_cli(*args, timeout=120, env=env)


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_train_shows_generation_on_stderr_and_quiet_shows_none(tmp_path):
    spec = "sbm:nodes=300,classes=3,features=4,cache=false"
    shown = gnnmesh("train", "--dataset", spec, "--epochs", "1", tmp_path=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "gnnmesh: sbm: drawing 1,500 distinct edges ...\n" in shown.stderr
    assert re.search(r"gnnmesh: sbm: drawing 1,500 distinct edges: done in \d+\.\d s", shown.stderr)
    assert "done:" in shown.stdout and "sbm:" not in shown.stdout
    quiet = gnnmesh("train", "--dataset", spec, "--epochs", "1", "--quiet", tmp_path=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


@pytest.mark.timeout(150)
def test_partition_command_shows_partitioning_and_writing_parts(tmp_path):
    result = gnnmesh("partition", "--dataset", "sbm:nodes=300,classes=3,features=4", "--parts", "2",
                     "--method", "rp", "--write-parts", str(tmp_path / "p"), "--cache-dir", str(tmp_path),
                     tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    for phase in ("writing sbm to the dataset cache", "rp: partitioning 300 vertices into 2 parts",
                  "writing 2 partition parts"):
        assert f"gnnmesh: {phase} ...\n" in result.stderr and f"gnnmesh: {phase}: done in " in result.stderr
    assert "parts:" in result.stdout and "gnnmesh:" not in result.stdout
