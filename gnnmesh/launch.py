"""Start N local ranks through torch's elastic launcher (what ``torchrun`` uses).

``gnnmesh train --nproc 4 ...`` re-runs the same command line in 4 worker processes with
the usual torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR/PORT, ...), rendezvousing on
a free localhost port. Under ``torchrun`` or Slurm (``srun torchrun ...``) that environment
is already there and no launcher runs: the same code path trains as one rank.
"""

from __future__ import annotations

import logging
import os
import sys
import uuid


def ranks_share_cores(local_world_size: int) -> int:
    """Compute threads per rank so that the ranks on one machine do not oversubscribe it."""
    return max(1, (os.cpu_count() or 1) // max(1, local_world_size))


def launch(argv: list, nproc: int) -> int:
    """Run ``python -m gnnmesh <argv>`` as ``nproc`` ranks; return the exit status.

    When a rank fails the launcher stops the others and reports which rank failed. Ranks
    that stop on bad input (exit status 2) have already printed the one-line error."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    os.environ.setdefault("OMP_NUM_THREADS", str(ranks_share_cores(nproc)))
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0,
                          monitor_interval=0.1)
    try:
        elastic_launch(config, sys.executable)("-m", "gnnmesh", *argv)
    except ChildFailedError as err:
        if any(f.exitcode == 2 for f in err.failures.values()):
            return 2  # bad input: rank 0 has printed the one-line error
        rank, first = err.get_first_failure()
        detail = _failure_text(first)
        print(f"gnnmesh: error: rank {rank} failed (exit code {first.exitcode}){': ' + detail if detail else ''}",
              file=sys.stderr)
        return 1
    return 0


def _failure_text(failure) -> str:
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    text = str(message or "").strip()
    if not text or text.startswith("To enable traceback"):
        return f"signal {failure.signal_name()}" if failure.exitcode < 0 else ""
    return text.splitlines()[-1] if "\n" in text else text
