"""Tensors made without a device, caught without a GPU.

On a CPU every tensor is where it should be, so a tensor made on the CPU inside a path that
runs on a GPU passes every CPU test and fails (or copies silently) on the GPU. This test reads
the code that runs during training and inference and lists every ``torch`` factory call
(``torch.empty``, ``zeros``, ``arange``, ``tensor`` ...) given no ``device=``: each must be one
of the host-side uses reviewed below, by module and function, with the reason it belongs on
the host. A new one fails here until it is given a device or added with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gnnmesh"
# The code a training step or a prediction runs through.
SCANNED = ["parallel", "ops", "models", "train", "view.py", "tasks.py", "comm.py", "host_store.py"]
FACTORIES = {"empty", "zeros", "ones", "full", "arange", "rand", "randn", "tensor", "eye", "linspace"}

HOST_SIDE = {
    # parameters: made on the CPU and moved with the model (model.to(device))
    ("models/decoupled.py", "Decoupled.__init__"): "parameters, moved with the model",
    ("models/gat.py", "GATLayer.__init__"): "parameters, moved with the model",
    ("models/gcn.py", "GCNLayer.__init__"): "parameters, moved with the model",
    ("models/gin.py", "GINLayer.__init__"): "parameters, moved with the model",
    ("models/rgat.py", "RGATLayer.__init__"): "parameters, moved with the model",
    ("models/rgcn.py", "RGCNLayer.__init__"): "parameters, moved with the model",
    ("models/gat.py", "EdgeLogits.__init__"): "parameters, moved with the model",
    ("models/gatv2.py", "GATv2Layer.__init__"): "parameters, moved with the model",
    ("models/gine.py", "GINELayer.__init__"): "parameters, moved with the model",
    # learned input embeddings: the table and its sparse optimizer live on the host
    ("train/embeddings.py", "initial_values"): "the embeddings' initial values, before the graph is split",
    ("train/embeddings.py", "with_embeddings"): "the input's embedding columns, before the graph is split",
    ("train/embeddings.py", "_shared"): "a scalar of the host-side optimizer's state",
    ("parallel/input_rows.py", "LeafRows.gradient"): "zeros for rows no gradient reached, for the host-side table",
    ("models/row_wise.py", "BatchNorm.__init__"): "parameters and buffers, moved with the model",
    # structure and index arrays: built on the host; the kernels copy what they use
    ("parallel/partition/halo.py", "_sub_block"): "a block's CSR row pointers (host structure)",
    ("parallel/partition/halo.py", "local_operator"): "the row of each block entry, to split the block (host structure)",
    ("parallel/partition/halo.py", "LocalOperator._build_block"): "a block's CSR rebuilt from its parts (host structure)",
    ("parallel/partition/halo.py", "LocalOperator.outer_of"): "the halo part's rows and row pointers split by message (host structure)",
    ("parallel/minibatch/routes.py", "SourceNodeRoute.serve"): "self-loop values of a host CSR block",
    ("parallel/strategy.py", "RankData.row_ids"): "global ids, for metrics gathered and predictions written",
    ("parallel/tensor/layout_switch.py", "LayoutSwitch.owned_in"): "row ids to exchange, moved by the switch",
    ("parallel/tensor/host_store.py", "_TensorPasses.__init__"): "row ranges of host-tier reads",
    ("parallel/tensor/host_store.py", "TensorOffload.rank_data"): "global ids of the host tier's rows",
    ("parallel/offload/host_tier.py", "HostTier.rank_data"): "an empty stand-in for features kept in the host tier",
    # host memory by design
    ("parallel/minibatch/feature_homes.py", "HomedSource.read"): "feature rows read from a host store",
    # the parts writer of P ranks: it runs before training, on the host, over gloo
    ("parallel/partition/parts_from_shards.py", "_node_count"): "a node count summed over the writer's ranks",
    ("parallel/partition/parts_from_shards.py", "_operators"): "a count of missing self-loops summed over ranks",
    ("host_store.py", "HostStore.create"): "the host tier's tables",
    ("host_store.py", "HostStore.read"): "pinned staging (the device's tensor is made with its device)",
    ("comm.py", "Comm.irecv"): "gloo receives CUDA tensors through host memory",
    ("ops/buffers.py", "empty"): "the CPU kernels' pooled outputs (the pool serves the CPU only)",
    ("ops/compiled.py", "_warm"): "compiling the CPU kernels on tiny inputs",
    ("ops/pairs.py", "_PairDot.backward"): "the CPU kernel's row bounds per thread (it runs on the CPU only)",
    # metrics, counts and setup: reduced on the host, once per epoch or run
    ("train/trainer.py", "Trainer.__init__"): "split sizes, summed over ranks on the host",
    ("train/trainer.py", "Trainer._setup_task"): "the loss divisor, summed over ranks",
    ("train/trainer.py", "labelled"): "labels and masks of a graph that has none, before the graph is split",
    ("tasks.py", "Task.sums"): "metric sums, kept on the host",
    ("tasks.py", "Classification.setup"): "class weights (the loss moves them to the logits' device)",
    ("tasks.py", "Classification.sums"): "metric sums, kept on the host",
    ("tasks.py", "MultiLabel.sums"): "metric sums, kept on the host",
    ("tasks.py", "Regression.setup"): "the training targets' mean, reduced on the host",
    ("tasks.py", "_split_rows"): "row positions of the splits' labels, checked on the host",
    ("tasks.py", "Custom.sums"): "metric sums, kept on the host",
}


def deviceless_factories(path: Path) -> list:
    """``(function, factory, line)`` of every ``torch.<factory>(...)`` call in ``path`` without
    a ``device=`` keyword; ``function`` is the enclosing qualified name."""
    found = []

    def visit(node, names):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, names + [child.name])
                continue
            func = getattr(child, "func", None)
            if isinstance(child, ast.Call) and isinstance(func, ast.Attribute) and func.attr in FACTORIES \
                    and isinstance(func.value, ast.Name) and func.value.id == "torch" \
                    and not any(k.arg == "device" for k in child.keywords):
                found.append((".".join(names) or "<module>", func.attr, child.lineno))
            visit(child, names)

    visit(ast.parse(path.read_text()), [])
    return found


def scanned_files() -> list:
    out = []
    for name in SCANNED:
        path = PACKAGE / name
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def test_every_tensor_made_without_a_device_is_a_reviewed_host_side_one():
    unreviewed, seen = [], set()
    for path in scanned_files():
        module = path.relative_to(PACKAGE).as_posix()
        for function, factory, line in deviceless_factories(path):
            seen.add((module, function))
            if (module, function) not in HOST_SIDE:
                unreviewed.append(f"gnnmesh/{module}:{line} torch.{factory} in {function}")
    assert not unreviewed, ("tensors made without device= (give the view's or the input's device, or add "
                            "them to HOST_SIDE with the reason they belong on the host):\n  "
                            + "\n  ".join(unreviewed))
    stale = sorted(set(HOST_SIDE) - seen)
    assert not stale, f"HOST_SIDE names functions that make no such tensor any more: {stale}"


def test_the_scan_finds_a_tensor_made_without_a_device(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import torch\n\nclass A:\n    def f(self, x):\n"
                      "        return torch.zeros(3) + torch.ones(3, device=x.device)\n")
    assert deviceless_factories(module) == [("A.f", "zeros", 5)]
