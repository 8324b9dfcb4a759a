"""Typed-graph training: gnnmesh's R-GCN and R-GAT against PyG, accuracy against a GCN, and
the largest rank's memory under partition.

On the generated IGBH-like typed graph (``igbh-synth``: papers, authors, institutes and fields
of study, every relation with its reverse, 8 relations in all; 128 features on every node
type, as IGBH has):

1. **Epochs against PyG**, one process each, same threads, as ``epoch_vs_pyg.py`` measures
   them (fresh processes, alternating; 2 layers, no dropout, Adam): gnnmesh's ``rgcn`` (hidden
   64) against PyG's ``RGCNConv(aggr="mean")`` on the union graph with ``edge_type`` (the same
   maths, ``rgcn``) and against ``HeteroConv({r: SAGEConv((-1, -1), 64)}, aggr="sum")`` on
   the ``HeteroData`` (PyG's usual heterogeneous model: a root weight per relation,
   ``rgcn-sage``); gnnmesh's ``rgat`` (4 heads of 16) against ``HeteroConv({r: GATConv(...,
   add_self_loops=False, bias=False)}, aggr="sum")`` plus a root ``Linear`` (the same maths,
   ``rgat``). PyG gets the inputs ``gnnmesh.export.typed_inputs`` and ``Graph.to_pyg`` give.
2. **Accuracy**: R-GCN and R-GAT against a GCN on the same small graph loaded as one edge type
   (``:typed=false``), test accuracy over seeds (features on papers only).
3. **Memory per rank**: ``gnnmesh train --strategy partition --nproc P`` with ``--embed-dim
   16`` learned embeddings for the featureless types (features on papers only); the largest
   rank's peak resident memory at each P, against P = 1.

    python benchmarks/hetero.py                     # ~1M nodes, ~10M edges
    python benchmarks/hetero.py --nodes 100000      # a quick look: ~100k nodes, ~1M edges
    python benchmarks/hetero.py --sections accuracy --seeds 10
"""

from __future__ import annotations

import argparse
import sys

import torch

import driver
from driver import Spread
from epoch_vs_pyg import epoch_table, gnnmesh_step, measure, pyg_step

FRAMEWORKS = ("gnnmesh", "pyg")
SECTIONS = ("epochs", "accuracy", "memory")
# case -> (gnnmesh model, hidden width per head, heads, the PyG model it is held against)
CASES = {
    "rgcn": ("rgcn", 64, 1, 'RGCNConv(aggr="mean"), union graph'),
    "rgcn-sage": ("rgcn", 64, 1, "HeteroConv of SAGEConv, HeteroData"),
    "rgat": ("rgat", 16, 4, "HeteroConv of GATConv + root Linear"),
}
# the node types' shares of the nodes, as IGBH's; papers cite CITES others on average, and
# with 3 authors and 3 fields each and every relation's reverse the union has ~10 edges a node
SHARES = {"papers": 0.4, "authors": 0.5, "institutes": 0.01, "fos": 0.09}
CITES = 5.5
ACCURACY_MODELS = ("rgcn", "rgat", "gcn")


def graph_spec(nodes: int, features: int, features_on: str) -> str:
    counts = ",".join(f"{name}={max(1, round(share * nodes))}" for name, share in SHARES.items())
    return f"igbh-synth:{counts},cites={CITES},features={features},features_on={features_on}"


def load(args):
    from gnnmesh import datasets
    return datasets.load(args.spec)


# -- workers: one framework and one case per process ------------------------------------------
def gnnmesh_epoch(graph, args):
    model, hidden, heads, _ = CASES[args.case]
    attention = {"heads": heads, "attn_dropout": 0.0} if model == "rgat" else {}
    return gnnmesh_step(graph, False, model=model, hidden=hidden, layers=2, dropout=0.0, lr=0.01,
                        weight_decay=5e-4, **attention)


def pyg_epoch(graph, args):
    """PyG's model of the case on the inputs PyG takes; nothing of gnnmesh's graph is kept."""
    torch.manual_seed(0)
    if args.case == "rgcn":
        return pyg_union_rgcn(graph)
    data = graph.to_pyg()
    paper = data["paper"]
    model = hetero_model(args.case, data.metadata()[1], graph.num_features, graph.num_classes)
    x_dict, edge_index_dict = data.x_dict, data.edge_index_dict
    return pyg_step(model, lambda: model(x_dict, edge_index_dict), paper.y,
                    (paper.train_mask, paper.val_mask, paper.test_mask), False)


def pyg_union_rgcn(graph):
    from torch_geometric.nn import RGCNConv
    from gnnmesh.export import typed_inputs
    relations = graph.adj.relations.names
    x, edge_index, edge_type = typed_inputs(graph, relations)
    _, hidden, _, _ = CASES["rgcn"]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = RGCNConv(x.shape[1], hidden, len(relations), aggr="mean")
            self.conv2 = RGCNConv(hidden, graph.num_classes, len(relations), aggr="mean")

        def forward(self):
            return self.conv2(torch.relu(self.conv1(x, edge_index, edge_type)), edge_index, edge_type)

    model = Net()
    return pyg_step(model, model, graph.y, (graph.train_mask, graph.val_mask, graph.test_mask), False)


def hetero_model(case: str, edge_types: list, in_dim: int, classes: int):
    """Two ``HeteroConv`` layers over ``edge_types`` (the paper logits out): SAGEConvs, or
    GATConvs with a root ``Linear`` shared by the node types, as gnnmesh's R-GAT has."""
    from torch_geometric.nn import GATConv, HeteroConv, SAGEConv
    _, hidden, heads, _ = CASES[case]

    def layer(dim, out, last):
        if case == "rgcn-sage":
            return HeteroConv({e: SAGEConv((-1, -1), out) for e in edge_types}, aggr="sum"), None
        width, head_count = (out, 1) if last else (out * heads, heads)
        convs = {e: GATConv(dim, out, heads=head_count, concat=not last, add_self_loops=False, bias=False)
                 for e in edge_types}
        return HeteroConv(convs, aggr="sum"), torch.nn.Linear(dim, width)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            first, last = layer(in_dim, hidden, False), layer(hidden * heads, classes, True)
            self.convs = torch.nn.ModuleList([first[0], last[0]])
            self.roots = torch.nn.ModuleList([first[1], last[1]]) if case == "rgat" else None
            self.act = torch.nn.functional.elu if case == "rgat" else torch.relu

        def forward(self, x_dict, edge_index_dict):
            for i, conv in enumerate(self.convs):
                out = conv(x_dict, edge_index_dict)
                if self.roots is not None:
                    out = {t: h + self.roots[i](x_dict[t]) for t, h in out.items()}
                x_dict = out if i == len(self.convs) - 1 else {t: self.act(h) for t, h in out.items()}
            return x_dict["paper"]

    return Net()


def worker(args):
    torch.set_num_threads(args.threads)
    build = pyg_epoch if args.worker == "pyg" else gnnmesh_epoch
    measure(args, lambda: build(load(args), args))  # the graph lives on only where the step holds it


# -- the driver: the three sections ------------------------------------------------------------
def epochs_section(args):
    args.spec = graph_spec(args.nodes, args.features, "all")
    print(f"## Epochs against PyG\n\ngraph: {args.spec}  threads: {args.threads}  torch {torch.__version__}  "
          f"processes: {args.rounds} per framework and case, {args.epochs} timed epochs each")
    print(f"  {load(args)!r}")  # generated and cached once, so the workers only read the cache

    def label(case, name):
        model, hidden, heads, pyg = CASES[case]
        shape = f"{heads} heads of {hidden}" if heads > 1 else f"hidden {hidden}"
        return f"gnnmesh {model} ({shape})" if name == "gnnmesh" else f"PyG {pyg}"
    epoch_table(args.cases.split(","), args, __file__, label)


def accuracy_section(args):
    from gnnmesh import datasets
    from gnnmesh.config import Config
    from gnnmesh.train import Trainer
    torch.set_num_threads(args.threads)
    typed = graph_spec(args.accuracy_nodes, 16, "paper")
    print(f"\n## Accuracy\n\ngraph: {typed} (gcn: with typed=false)  {args.accuracy_epochs} epochs, "
          f"seeds 0-{args.seeds - 1}, each model's default recipe, one process\n")
    print(f"| model | test accuracy, median (min-max) over {args.seeds} seeds |")
    print("|---|---|")
    for model in args.accuracy_models.split(","):
        graph = datasets.load(typed + (",typed=false" if model == "gcn" else ""))
        accs = [100 * Trainer(Config.of(model=model, epochs=args.accuracy_epochs, seed=seed), graph).fit().test_acc
                for seed in range(args.seeds)]
        print(f"| {model} | {Spread.of(accs).format(1)} |", flush=True)


def memory_section(args):
    spec = graph_spec(args.nodes, args.features, "paper")
    epochs = 3
    flags = ["--dataset", spec, "--model", "rgcn", "--hidden", 64, "--layers", 2, "--dropout", 0,
             "--embed-dim", 16, "--strategy", "partition", "--partitioner", args.partitioner,
             "--epochs", epochs, "--eval-every", epochs]
    print(f"\n## Memory per rank\n\ngraph: {spec}  rgcn hidden 64, --embed-dim 16, --strategy partition "
          f"--partitioner {args.partitioner}, {epochs} epochs; peaks are resident memory (VmHWM)\n")
    print("| ranks | threads per rank | largest rank's peak MiB | vs. P = 1 | all ranks MiB | epoch s, median |")
    print("|---|---|---|---|---|---|")
    first = None
    for ranks in map(int, args.ranks.split(",")):
        threads = max(1, args.threads // ranks)
        records = driver.train(flags + ["--nproc", ranks, "--threads", threads])
        peak = records[-1]["peak_rss_mib_max"]
        first = first or peak
        epoch = driver.spread(driver.epochs(records, first=1), "epoch_time").median
        print(f"| {ranks} | {threads} | {peak:,.0f} | {peak / first:.2f}x | {records[-1]['peak_rss_mib_sum']:,.0f} | "
              f"{epoch:.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1_000_000, help="nodes of the epoch and memory graphs")
    parser.add_argument("--features", type=int, default=128)
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--cases", default=",".join(CASES), help=f"epochs: comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--epochs", type=int, default=3, help="epochs: timed epochs per process")
    parser.add_argument("--warmup", type=int, default=1, help="epochs: untimed epochs first (at least 1)")
    parser.add_argument("--rounds", type=int, default=3, help="epochs: processes per framework and case")
    parser.add_argument("--accuracy-nodes", type=int, default=7500,
                        help="accuracy: nodes of its graph (7,500: 3,000 papers)")
    parser.add_argument("--accuracy-epochs", type=int, default=50)
    parser.add_argument("--accuracy-models", default=",".join(ACCURACY_MODELS),
                        help="accuracy: comma-separated, the typed models and gcn (which sees one edge type)")
    parser.add_argument("--seeds", type=int, default=5, help="accuracy: seeds per model")
    parser.add_argument("--ranks", default="1,2,4", help="memory: comma-separated rank counts")
    parser.add_argument("--partitioner", default="hp", help="memory: the vertex partitioner")
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    parser.add_argument("--case", choices=list(CASES), help=argparse.SUPPRESS)
    parser.set_defaults(data_root=None)  # the graphs are generated
    args = parser.parse_args()
    args.warmup = max(args.warmup, 1)  # PyG's lazy modules take their shapes in the first epoch
    if args.worker:
        return worker(args)
    sections = args.sections.split(",")
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        sys.exit(f"--sections: no section {unknown[0]!r}; the sections are {', '.join(SECTIONS)}")
    for section in sections:
        {"epochs": epochs_section, "accuracy": accuracy_section, "memory": memory_section}[section](args)


if __name__ == "__main__":
    main()
