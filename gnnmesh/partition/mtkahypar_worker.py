"""Runs one Mt-KaHyPar partitioning in a child process (see ``methods.run_mtkahypar``).

Mt-KaHyPar's Python binding holds the GIL for the whole call, so the caller could neither
report progress nor be interrupted while it runs; its thread pool can be set up only once
per process; and the non-deterministic presets give the same result for the same seed (on
one thread) only in a fresh process. Running each call here fixes all three.

Run by path (``python mtkahypar_worker.py DIR``), so that it imports numpy and mtkahypar
only, not gnnmesh and torch. DIR holds ``input.npz``; the partition goes to ``output.npy``.
"""

import sys


def main(folder: str) -> None:
    import mtkahypar
    import numpy as np

    data = np.load(f"{folder}/input.npz", allow_pickle=False)
    n, parts, threads, seed = (int(data[k]) for k in ("n", "parts", "threads", "seed"))
    epsilon, preset = float(data["epsilon"]), str(data["preset"])
    starts, pins = data["net_starts"].tolist(), data["pins"].tolist()  # Python ints convert fastest
    nets = [pins[starts[j]:starts[j + 1]] for j in range(len(starts) - 1)]
    del pins
    net_weights = data["net_weights"].tolist() if "net_weights" in data.files else [1] * len(nets)
    init = mtkahypar.initialize(threads, False)
    context = init.context_from_preset(getattr(mtkahypar.PresetType, preset.upper()))
    context.set_partitioning_parameters(parts, epsilon, mtkahypar.Objective.KM1)
    context.logging = False
    mtkahypar.set_seed(seed)
    hg = init.create_hypergraph(context, n, len(nets), nets, data["weights"].tolist(), net_weights)
    del nets
    np.save(f"{folder}/output.npy", np.asarray(hg.partition(context).get_partition(), dtype=np.int64))


def die_with_parent() -> None:
    """A killed parent (kill -9) cannot kill us: let Linux do it (PR_SET_PDEATHSIG = 1)."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)


if __name__ == "__main__":
    die_with_parent()
    sys.path.pop(0)  # this file's folder: gnnmesh's module names must not shadow other imports
    main(sys.argv[1])
