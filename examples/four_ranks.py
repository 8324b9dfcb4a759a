"""A layer gnnmesh does not ship (GraphConv, ``examples/graphconv.py``), trained on 4 ranks
under 3D parallelism, and the same run on one process, to show they agree: the command line
starts the ranks (``--nproc 4``), each rank imports the model's file and builds it alike.

    python examples/four_ranks.py
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = f"{HERE / 'graphconv.py'}:GraphConv"


def train(*flags) -> list:
    """The per-epoch losses of ``gnnmesh train`` on Cora with the GraphConv model."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "metrics.jsonl"
        subprocess.run([sys.executable, "-m", "gnnmesh", "train", "--model", MODEL, "--model-args", "hidden=16",
                        "--dataset", "cora", "--epochs", "10", "--quiet", "--metrics", str(metrics), *flags],
                       check=True)
        return [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]


grid = train("--nproc", "4", "--strategy", "grid3d", "--grid", "2,1,2")
alone = train()
worst = max(abs(a - b) / abs(b) for a, b in zip(grid, alone))
print(f"GraphConv on 4 ranks (grid3d 2x1x2) and on one process: losses agree to {worst:.1e} (relative)")
if worst > 1e-5:
    sys.exit("the 4-rank run does not equal the single process")
