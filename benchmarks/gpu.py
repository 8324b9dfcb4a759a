"""One command on one GPU: every model's epoch against PyG, the SpMM's bandwidth, and
out-of-core training against in-memory.

    python benchmarks/gpu.py                                   # R-MAT 2M nodes, 20M edges, 128 features
    python benchmarks/gpu.py --device cpu --nodes 20000 --edges 200000 --epochs 2   # the CPU dry run
    python benchmarks/gpu.py --tables models --kernels torch    # gnnmesh on torch's ops, not Triton's

Three tables, measured side by side in one run on one device:

* **models**: a training epoch (forward, backward, Adam step; 2 layers, no dropout) of every
  gnnmesh model, and of PyG's ``GCNConv`` (cached), ``SAGEConv`` and ``GATConv`` (4 heads)
  given the same CSR adjacency on the same device: the median epoch over ``--epochs`` after
  ``--warmup``, its range, and the peak device memory (``torch.cuda.max_memory_allocated``,
  the graph and features included) of each, run one after the other in this process;
* **SpMM**: the GCN operator times a 128-wide matrix, forward and transposed, as effective
  bandwidth (the bytes an ideal kernel moves over the measured time) and as a share of the
  device's measured copy bandwidth (read + written bytes of a device-to-device copy);
* **out of core**: ``gnnmesh train`` (a fresh process each) in memory, then
  ``--strategy offload --host-store ram`` at a budget of ``1/--ratio`` of the in-memory run's
  peak device memory (raised to the smallest budget the planner accepts when that is more),
  with the transfers overlapping compute on copy streams (``--overlap``) and in line
  (``--no-overlap``, at the same budget): the epoch time against in-memory and overlap on
  against off, the fast tier's peak against the budget, and the host -> device rate while
  loading (bytes loaded over the time spent in host-tier reads) against a pinned host ->
  device copy.

On the CPU the same code runs as a dry run (no peak device memory; pinned memory is not used).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from driver import Spread, TrainFailed, epochs, spread, train  # noqa: E402
from epoch_vs_pyg import pyg_model  # noqa: E402
from kernels import spmm_bytes, timed  # noqa: E402

from gnnmesh import datasets  # noqa: E402
from gnnmesh.validate import format_bytes, parse_bytes  # noqa: E402

MiB = 2**20
# row name -> (gnnmesh config fields, PyG case of epoch_vs_pyg or None)
MODELS = {
    "gcn": (dict(model="gcn", hidden=128), "gcn"),
    "sage": (dict(model="sage", hidden=128), "sage"),
    "gat": (dict(model="gat", hidden=8, heads=4, attn_dropout=0.0), "gat"),
    "gin": (dict(model="gin", hidden=128), None),
    "decoupled gcn": (dict(model="gcn", hidden=128, decoupled=True), None),
    "decoupled gat": (dict(model="gat", hidden=8, heads=4, attn_dropout=0.0, decoupled=True), None),
}


class Device:
    """The device's clock discipline and memory counters (nothing to count on the CPU)."""

    def __init__(self, name: str):
        self.device = torch.device(name)
        self.cuda = self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def fresh(self) -> None:
        """Let go of the last case's memory and start its peak counter again."""
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_mib(self):
        return torch.cuda.max_memory_allocated(self.device) / MiB if self.cuda else None

    def describe(self) -> str:
        if not self.cuda:
            return f"cpu ({torch.get_num_threads()} threads), torch {torch.__version__} (dry run)"
        props = torch.cuda.get_device_properties(self.device)
        return (f"{props.name}, {props.total_memory / 2**30:.0f} GiB, {props.multi_processor_count} SMs; "
                f"torch {torch.__version__}, CUDA {torch.version.cuda}")


def kernels(device: Device) -> str:
    """Which sparse kernels gnnmesh's runs use on the device."""
    from gnnmesh.ops import compiled, fused
    fused_on = fused.available(torch.zeros(1, device=device.device))
    return f"GNNMESH_KERNELS={compiled.choice()}: " + ("Triton (fused attention)" if fused_on else
                                                      "torch's ops" if device.cuda else "compiled CPU kernels")


# -- models -----------------------------------------------------------------------------------
def gnnmesh_step(graph, fields: dict, device: Device):
    from gnnmesh.config import Config
    from gnnmesh.ops import buffers
    from gnnmesh.train import Trainer
    buffers.pool(True)  # as `gnnmesh train` runs it
    config = Config.of(**fields, layers=2, dropout=0.0, lr=0.01, weight_decay=5e-4, device=str(device.device))
    return Trainer(config, graph).train_step


def pyg_step(graph, case: str, device: Device):
    import torch.nn.functional as F
    dev, n = device.device, graph.num_nodes
    adj_t = torch.sparse_csr_tensor(graph.adj.indptr, graph.adj.indices, torch.ones(graph.num_edges),
                                    size=(n, n), check_invariants=False).to(dev)
    x = graph.x.to_dense() if graph.x.layout != torch.strided else graph.x
    x, y, mask = x.float().to(dev), graph.y.to(dev), graph.train_mask.to(dev)
    torch.manual_seed(0)
    model = pyg_model(case, x.shape[1], graph.num_classes).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    def step():
        model.train()
        loss = F.cross_entropy(model(x, adj_t)[mask], y[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    return step


def measure(make, device: Device, args) -> tuple:
    """(Spread of epoch seconds, peak MiB) of one framework's step, built by ``make()``."""
    device.fresh()
    step = make()
    for _ in range(max(0, args.warmup - 1)):  # timed() warms up once more
        step()
    out = timed(step, args.epochs, device.sync)
    peak = device.peak_mib()
    del step
    device.fresh()
    return out, peak


def model_table(graph, device: Device, args) -> None:
    print("\n| model | gnnmesh epoch ms | peak MiB | PyG layer | PyG epoch ms | peak MiB "
          "| gnnmesh / PyG: time | memory |")
    print("|---|---|---|---|---|---|---|---|")
    mib = (lambda v: "-" if v is None else f"{v:,.0f}")
    for name in args.models.split(","):
        fields, case = MODELS[name]
        ours, our_peak = measure(lambda: gnnmesh_step(graph, fields, device), device, args)
        cells = [name, ours.format(1, 1e3), mib(our_peak)]
        if case is None:
            cells += ["-"] * 5
        else:
            theirs, their_peak = measure(lambda: pyg_step(graph, case, device), device, args)
            layer = {"gcn": "GCNConv", "sage": "SAGEConv", "gat": "GATConv"}[case]
            memory = "-" if our_peak is None else f"**{our_peak / their_peak:.2f}x**"
            cells += [layer, theirs.format(1, 1e3), mib(their_peak),
                      f"**{ours.median / theirs.median:.2f}x**", memory]
        print("| " + " | ".join(cells) + " |", flush=True)


# -- SpMM -------------------------------------------------------------------------------------
def copy_gbs(device: Device, mib: int, repeats: int) -> float:
    """A device-to-device copy's bandwidth, read + written bytes over its median time."""
    src = torch.rand(mib * 2**18, device=device.device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), repeats, device.sync).median / 1e9


def pinned_gbs(device: Device, mib: int, repeats: int) -> float:
    """Host -> device over a pinned buffer (on the CPU, a plain copy), bytes over the median time."""
    src = torch.rand(mib * 2**18, pin_memory=device.cuda)
    dst = torch.empty_like(src, device=device.device)
    return src.numel() * 4 / timed(lambda: dst.copy_(src, non_blocking=True), repeats, device.sync).median / 1e9


def spmm_table(graph, device: Device, args) -> None:
    from gnnmesh.ops.spmm import multiply
    from gnnmesh.view import GraphView
    view = GraphView(graph.adj, device=device.device)
    gcn = view.operator("gcn")
    x = torch.rand(graph.num_nodes, args.features, device=device.device)
    copy = copy_gbs(device, args.copy_mib, args.repeats)
    moved = spmm_bytes(graph.num_nodes, gcn.nnz, args.features)
    print(f"\n| SpMM, {args.features} columns | ms, median (min-max) | GB/s effective "
          f"| share of the copy's {copy:,.0f} GB/s |")
    print("|---|---|---|---|")
    for name, transpose in (("A x (forward)", False), ("A^T x (backward)", True)):
        t = timed(lambda: multiply(gcn, gcn.values, x, transpose), args.repeats, device.sync)
        gbs = moved / t.median / 1e9
        print(f"| {name} | {t.format(2, 1e3)} | {gbs:,.0f} | {gbs / copy:.0%} |", flush=True)


# -- out of core ------------------------------------------------------------------------------
def run_train(flags: list, args) -> list:
    return epochs(train(["--dataset", args.spec, "--device", str(args.device), "--epochs", args.train_epochs,
                         *flags], timeout=args.timeout, data_root=args.data_root), first=1)


def offload_run(budget: int, args, overlap: bool) -> tuple:
    """Offload at ``budget`` bytes, raised once to the smallest budget the planner accepts."""
    flags = ["--strategy", "offload", "--host-store", "ram", "--overlap" if overlap else "--no-overlap"]
    try:
        return budget, run_train(flags + ["--device-memory", f"{budget}B"], args)
    except TrainFailed as err:
        least = re.search(r"give at least ([0-9.]+ [KMGT]iB)", str(err))
        if least is None:
            raise
        budget = int(1.02 * parse_bytes(least.group(1), "device_memory"))
        return budget, run_train(flags + ["--device-memory", f"{budget}B"], args)


def offload_table(device: Device, args) -> None:
    memory = run_train([], args)
    peak_key = "peak_device_mib_max" if device.cuda else "peak_rss_mib_max"
    in_memory_peak = max(r[peak_key] for r in memory) * MiB
    budget, overlapped = offload_run(int(in_memory_peak / args.ratio), args, True)
    _, in_line = offload_run(budget, args, False)  # needs no more: nothing is in flight
    mem_t = spread(memory, "epoch_time")
    pinned = pinned_gbs(device, args.copy_mib, args.repeats)
    on_t = spread(overlapped, "epoch_time")
    print(f"\n| gcn, {args.train_epochs} epochs (first left out) | epoch s | peak MiB | budget "
          f"| K | vs in-memory | vs overlap off | load GB/s (pinned copy {pinned:,.1f}) |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| in memory | {mem_t.format(3)} | {in_memory_peak / MiB:,.0f} | - | - | 1.00x | - | - |")
    for name, runs in (("offload, ram store, overlap on", overlapped), ("offload, ram store, overlap off", in_line)):
        t = spread(runs, "epoch_time")
        loaded = Spread.of(r["offload_load_bytes"] / r["host_io_time"] / 1e9 for r in runs)
        peak = max(r["fast_peak_bytes_max"] for r in runs)
        print(f"| {name} | {t.format(3)} | {peak / MiB:,.0f} | {format_bytes(budget)} "
              f"({budget / in_memory_peak:.2f} of in-memory) | {runs[-1]['chunks']} "
              f"| **{t.median / mem_t.median:.2f}x** | {on_t.median / t.median:.2f}x "
              f"| {loaded.format(1)} ({loaded.median / pinned:.0%}) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), or cpu for the dry run")
    parser.add_argument("--nodes", type=int, default=2_000_000)
    parser.add_argument("--edges", type=int, default=20_000_000)
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--classes", type=int, default=16)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per model and framework")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per SpMM and copy")
    parser.add_argument("--copy-mib", type=int, default=1024, help="size of the copies timed for bandwidth")
    parser.add_argument("--ratio", type=float, default=4.0, help="in-memory peak / out-of-core budget")
    parser.add_argument("--train-epochs", type=int, default=4, help="epochs of each gnnmesh train run")
    parser.add_argument("--tables", default="models,spmm,offload", help="which tables to print")
    parser.add_argument("--data-root", default=os.environ.get("GNNMESH_DATA"))
    parser.add_argument("--timeout", type=float, default=900, help="seconds per gnnmesh train run")
    parser.add_argument("--kernels", choices=("auto", "torch", "triton"),
                        help="GNNMESH_KERNELS for gnnmesh's runs (default: as set, else auto: on CUDA the fused "
                             "Triton kernels where triton imports; torch: cuSPARSE and torch's index ops)")
    args = parser.parse_args()
    if args.kernels:
        os.environ["GNNMESH_KERNELS"] = args.kernels  # read at every op; the train runs inherit it
    device = Device(args.device)
    if device.cuda and not torch.cuda.is_available():
        parser.error("no CUDA device here: pass --device cpu for the dry run")
    args.spec = f"rmat:nodes={args.nodes},edges={args.edges},features={args.features},classes={args.classes}"
    graph = datasets.load(args.spec, root=args.data_root)
    print(f"device: {device.describe()}\ngraph: {graph!r}\ngnnmesh kernels: {kernels(device)}")
    tables = args.tables.split(",")
    if "models" in tables:
        model_table(graph, device, args)
    if "spmm" in tables:
        spmm_table(graph, device, args)
    if "offload" in tables:
        offload_table(device, args)


if __name__ == "__main__":
    main()
