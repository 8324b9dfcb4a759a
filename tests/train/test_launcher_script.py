"""The library under a launcher: a script that ``torchrun`` starts on every rank builds a
``Trainer`` that joins the job, starts every rank from rank 0's parameters, and equals the
single process; without a job, what needs one is one clear line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.parts import open_parts
from gnnmesh.parallel.tensor.parts import write_tensor_parts
from gnnmesh.train import Trainer
from tests.helpers import random_graph

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "torchrun_trainer.py"

# Every rank seeds torch with a seed of its own before it builds the model (rank 0's is 7).
WRAPPER = f"""
import os, runpy, sys
sys.argv = [{str(EXAMPLE)!r}, sys.argv[1], str(7 + 100 * int(os.environ.get("RANK", 0)))]
runpy.run_path({str(EXAMPLE)!r}, run_name="__main__")
"""


def run_script(tmp_path, name, *launcher):
    wrapper, losses = tmp_path / "wrapper.py", tmp_path / f"{name}.json"
    wrapper.write_text(WRAPPER)
    done = subprocess.run([sys.executable, *launcher, str(wrapper), str(losses)], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(losses.read_text())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_torchrun_script_of_two_ranks_equals_the_single_process(tmp_path):
    out, two = run_script(tmp_path, "two", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
    assert out.startswith("2 ranks:") and out.count("ranks:") == 1  # joined the job; rank 0 reports
    _, one = run_script(tmp_path, "one")
    assert len(two) == len(one) == 5
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(two, one)), (two, one)


def test_several_slurm_tasks_without_torchrun_variables_are_refused(monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_PROCID", "1")
    with pytest.raises(ConfigError, match=r"task 1 of 2 that Slurm started.*'srun torchrun"):
        Trainer(Config.of(strategy="partition", epochs=1), random_graph())


def test_nproc_without_a_job_names_how_to_start_the_ranks():
    with pytest.raises(ConfigError, match=r"2 ranks requested but this job has 1; .*torchrun --nproc-per-node 2"):
        Trainer(Config.of(strategy="partition", nproc=2, epochs=1), random_graph())


def test_parts_of_several_ranks_without_a_job_say_so(tmp_path):
    write_tensor_parts(random_graph(), 2, tmp_path / "t", "random")
    with pytest.raises(ConfigError, match=r"this job has 1 rank \(start one rank per part: 'gnnmesh train --nproc 2'"):
        Trainer(Config.of(strategy="tensor", epochs=1), open_parts(tmp_path / "t"))
