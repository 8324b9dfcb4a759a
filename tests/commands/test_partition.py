"""``gnnmesh partition --input``: a rank killed (SIGKILL) after a phase, the job restarted by
``--max-restarts`` or the command rerun by hand, resumes after the last phase every rank
kept and writes the parts of an uninterrupted run; the flag's refusals."""

import re

import pytest

from tests.forked import run_cli
from tests.helpers import gnnmesh_in_process, one_error_line
from tests.parallel.partition.test_parts_from_shards import same_parts

# Put first on PYTHONPATH, this makes rank 1 of a job's first run SIGKILL itself once both
# ranks have kept the phase GNNMESH_TEST_KILL_AFTER names: a loss at a chosen instant (the
# rank's interpreter is new, so the test can reach it only so).
KILLER = '''
import os
if os.environ.get("RANK") == "1" and os.environ.get("GNNMESH_TEST_KILL_AFTER") \\
        and not os.environ.get("GNNMESH_RESTART_COUNT"):
    import signal
    import time
    from gnnmesh.parallel.partition import phases
    keep = phases.Phases._save

    def keep_then_die(self, name, arrays):
        keep(self, name, arrays)
        if name == os.environ["GNNMESH_TEST_KILL_AFTER"]:
            deadline = time.monotonic() + 30  # rank 0 would be stopped wherever it is
            while not (self.folder / "rank-00000" / f"{name}.json").is_file() and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
    phases.Phases._save = keep_then_die
'''


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A shard set, the parts of an uninterrupted 2-rank run, and the environment of a job
    whose rank 1 dies after a phase."""
    import os
    folder = tmp_path_factory.mktemp("job")
    done = run_cli("datasets", "--shard", "rmat:nodes=2000,edges=20000,features=8", "--out", folder / "s",
                   "--shards", "2")
    assert done.returncode == 0, done.stderr
    done = run_cli(*command(folder, "reference"))
    assert done.returncode == 0 and "resumed" not in done.stdout, done.stderr
    (folder / "hook").mkdir()
    (folder / "hook" / "sitecustomize.py").write_text(KILLER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder / "hook"), os.environ.get("PYTHONPATH", "")]))
    return folder, env


def command(folder, out, *flags) -> list:
    return ["partition", "--nproc", "2", "--input", folder / "s", "--partitioner", "rp", "--write-parts",
            folder / out, *flags]


@pytest.mark.slow  # three jobs of 2 ranks, each rank a new interpreter
@pytest.mark.timeout(400)
def test_a_restarted_job_resumes_after_the_phase_its_ranks_kept(job):
    folder, env = job
    done = run_cli(*command(folder, "restarted", "--max-restarts", "1"),
                   env=dict(env, GNNMESH_TEST_KILL_AFTER="assignment"), timeout=300)
    assert done.returncode == 0, done.stderr
    resumed = [line for line in done.stdout.splitlines() if line.startswith("resumed:")]
    assert resumed == [f"resumed:       after phase 2 of 4 (assignment) of an earlier run, kept in "
                       f"{folder / 'restarted'}.partial"], done.stdout
    same_parts(folder / "restarted", folder / "reference")
    assert not (folder / "restarted.partial").exists()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_job_rerun_by_hand_resumes(job):
    folder, env = job
    killed = run_cli(*command(folder, "by-hand"), env=dict(env, GNNMESH_TEST_KILL_AFTER="part-rows"), timeout=200)
    assert killed.returncode == 1 and re.search(r"rank \d failed", killed.stderr), killed.stderr
    assert not (folder / "by-hand").exists() and (folder / "by-hand.partial").is_dir()
    done = run_cli(*command(folder, "by-hand"), timeout=200)
    assert done.returncode == 0, done.stderr
    assert "resumed:       after phase 3 of 4 (part-rows)" in done.stdout, done.stdout
    same_parts(folder / "by-hand", folder / "reference")
    assert not (folder / "by-hand.partial").exists()


@pytest.mark.parametrize("flags, fragment", [
    (["--dataset", "cora", "--nparts", "2", "--max-restarts", "1"], "--max-restarts applies with --input only"),
    (["--input", "s", "--write-parts", "p", "--max-restarts", "1"], "--max-restarts needs --nproc 2 or more"),
    (["--input", "s", "--write-parts", "p", "--nproc", "2", "--max-restarts", "-1"], "must be 0 or more"),
])
def test_restarts_that_cannot_apply_are_refused(tmp_path, flags, fragment):
    one_error_line(gnnmesh_in_process("partition", *[str(tmp_path / f) if f in ("s", "p") else f for f in flags]),
                   fragment)


def test_restarts_under_torchrun_are_torchruns(tmp_path):
    result = gnnmesh_in_process("partition", "--input", str(tmp_path / "s"), "--write-parts", str(tmp_path / "p"),
                                "--max-restarts", "1", env={"RANK": "0", "WORLD_SIZE": "2"})
    assert "give --max-restarts to torchrun" in result.stderr.splitlines()[-1], result.stderr
