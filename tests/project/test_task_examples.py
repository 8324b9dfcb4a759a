"""The task examples (examples/multilabel.py, examples/regression.py) run as they are, and their
partition and offload runs on two ranks print the one-process run's numbers."""

import re
from pathlib import Path

import pytest

from gnnmesh import tasks
from tests.forked import run_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, task", [("multilabel", "multilabel"), ("regression", "regression")])
def test_the_examples_labels_infer_their_task(name, task):
    import importlib
    module = importlib.import_module(f"examples.{name}")
    assert tasks.infer(module.make_graph().y)[0] == task


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", ["multilabel", "regression"])
def test_the_example_runs_and_every_strategy_agrees(name):
    out = run_script(ROOT / "examples" / f"{name}.py", cwd=ROOT, timeout=150)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    one = re.search(r"final loss ([\d.]+), best val \S+ ([\d.]+).*test \S+ ([\d.]+)", lines[1]).groups()
    for line in lines[2:]:
        assert line.startswith(("partition, 2 ranks", "offload, 2 ranks")), line
        best = re.search(r"best val \S+ ([\d.]+) at epoch \d+, test ([\d.]+), final loss ([\d.]+)", line).groups()
        assert (best[2], best[0], best[1]) == one, line
    assert len(lines) == 4
