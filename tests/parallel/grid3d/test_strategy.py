"""3D tensor parallelism (grid3d) trains GCN, SAGE and GIN exactly like the single process on
every grid of 1, 2, 4 and 8 ranks; its layout tiles every matrix; its traffic matches a
closed form; the models it cannot run are refused when the configuration is checked."""

import json

import numpy as np
import pytest
import torch

from gnnmesh import strategies
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models import build_model, options_of
from gnnmesh.parallel import SingleProcess
from gnnmesh.parallel.grid3d.strategy import WHOLE, Grid3D, GridView, grad_blocks, reductions, share
from gnnmesh.layout import ParallelLayout
from gnnmesh.layout.grid import AXES, roles
from gnnmesh.parallel.grid3d.collectives import logit_route
from gnnmesh.parallel.grid3d.blocks import GridBlocks
from gnnmesh.view import GraphView


from tests.dist import run_ranks
from tests.forked import run_cli
from tests.helpers import dense, layout, random_graph
from tests import parity
from tests.parity import assert_same_run

# Two evaluated epochs among six: parity and the collectives' bytes cover training and the
# evaluation passes, with Adam's moments carried over several steps.
EPOCHS, EVAL_EVERY = 6, 3
# the models grid3d runs on this module's plain graph (R-GCN's typed-graph parity: tests/models/test_rgcn.py)
GRID3D_MODELS = tuple(m for m in strategies.spec("grid3d").models if "relations" not in options_of(m))


pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)


def make_graph():
    # 37 nodes (no grid axis divides it), directed, self-loops, two isolated nodes
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def config(layers, model="gcn", **kw):
    return Config.of(model=model, epochs=EPOCHS, seed=1, hidden=8, layers=layers, eval_every=EVAL_EVERY, **kw)


def grids(world):
    return [(x, y, world // (x * y)) for x in range(1, world + 1) for y in range(1, world // x + 1)
            if world % (x * y) == 0]


def every_coords(dims):
    return [dict(zip(AXES, c)) for c in np.ndindex(dims["x"], dims["y"], dims["z"])]


@pytest.mark.parametrize("grid", ["2,2", "2,x,1", "0,1,1", "1,1,-1", "2,1,1", ""])
def test_bad_grid_is_a_config_error_naming_the_field(grid):
    with pytest.raises(ConfigError, match="'grid'") as err:
        Grid3D(ParallelLayout.for_strategy("grid3d", 1, grid), "cpu")  # one process: the product must be 1
    assert "\n" not in str(err.value)


def test_bad_grid_on_the_command_line_exits_with_status_2():
    result = run_cli("train", "--dataset", "sbm:nodes=40,classes=2,features=4",
                     "--strategy", "grid3d", "--grid", "2,1,1", "--epochs", "1", timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "'grid'" in lines[0], result.stderr


@pytest.mark.parametrize("fields", [{"model": "gat"}, {"model": "gcn", "decoupled": True}, {"model": "sage", "decoupled": True}])
def test_models_grid3d_cannot_run_are_refused_when_the_config_is_checked(fields):
    with pytest.raises(ConfigError, match="'model'") as err:
        Config.of(strategy="grid3d", **fields)
    assert "\n" not in str(err.value) and ", ".join(GRID3D_MODELS) in str(err.value)
    with pytest.raises(ConfigError, match="'model'"):
        Config.of(**fields).updated(strategy="grid3d")
    for model in GRID3D_MODELS:
        Config.of(strategy="grid3d", model=model)


def test_a_model_grid3d_cannot_run_is_refused_before_the_data_is_read():
    result = run_cli("train", "--dataset", "no-such-dataset", "--strategy", "grid3d", "--model", "gat",
                     "--epochs", "1", timeout=120)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "'model'" in lines[0], result.stderr


def test_the_strategy_itself_refuses_a_model_without_a_layer_description():
    with pytest.raises(ConfigError, match="'model'"):  # the trainer's config names no strategy
        train(make_graph(), Config.of(model="gat", epochs=1, hidden=8), Grid3D(ParallelLayout.for_strategy("grid3d", 1, "1,1,1"), "cpu"))


# -- layout ----------------------------------------------------------------------------------------
def test_balanced_layout_evens_the_blocks_of_every_layer():
    """Given the graph, the layout's permutation pair balances the adjacency blocks of all
    three planes; the random pair cannot on a graph this size."""
    graph = random_graph(n=400, e=6000, features=2, classes=2, directed=False)
    op = GraphView(graph.adj).operator("gcn").to_scipy()
    dims = {"x": 2, "y": 2, "z": 2}

    def worst(layout):
        ratios = []
        for layer in range(3):
            r = roles(layer)
            counts = [op[layout.nodes(layer + 1, r.rows, c)][:, layout.nodes(layer, r.cols, c)].nnz
                      for c in every_coords(dims)]
            ratios.append(max(counts) / np.mean(counts))
        return max(ratios)

    balanced = worst(GridBlocks(dims, graph.num_nodes, True, seed=0, adj=graph.adj))
    assert balanced <= 1.01 and balanced < worst(GridBlocks(dims, graph.num_nodes, True, seed=0))


@pytest.mark.parametrize("grid,permute", [((2, 2, 2), True), ((1, 2, 4), False), ((4, 1, 2), True),
                                          ((2, 3, 1), True), ((1, 1, 5), False)])
def test_layout_tiles_every_matrix(grid, permute):
    """Adjacency blocks of every layer (six distinct: three planes x two permutations), loss
    rows, the logits exchange and the gradient pieces each cover their matrix exactly once."""
    graph = make_graph()
    n, dims = graph.num_nodes, dict(zip(AXES, grid))
    layout = GridBlocks(dims, n, permute, seed=3, adj=graph.adj if permute else None)
    coords = every_coords(dims)
    want = dense(GraphView(graph.adj).operator("gcn"))
    for layer in range(6):
        r, got = roles(layer), torch.zeros(n, n)
        for c in coords:
            if c[r.feats]:  # replicas along feats hold the same block
                continue
            view = GridView(graph.adj, layout, c, blocks=4, num_rows=0, seed=0, device="cpu")
            block, row_blocks = view.adjacency(layer)
            rows, cols = layout.nodes(layer + 1, r.rows, c), layout.nodes(layer, r.cols, c)
            got[np.ix_(rows, cols)] += dense(block)
            assert torch.equal(torch.cat([dense(b) for b in row_blocks]), dense(block))
        assert torch.equal(got, want), f"layer {layer}"
    scored = [layout.loss_rows(q, len(coords)) for q in range(len(coords))]
    assert sorted(np.concatenate(scored).tolist()) == list(range(n))
    # logits exchange: what every rank sends to q is what q expects, and q's rows fill once
    classes, layers = 5, 3
    plans = [logit_route(layout, layers, classes, coords, q) for q in range(len(coords))]
    for q, plan in enumerate(plans):
        assert [p.send_counts[q] for p in plans] == plan.recv_counts
        assert sorted(plan.recv_index.tolist()) == list(range(len(layout.loss_rows(q, len(coords))) * classes))
    _check_gradient_pieces(dims, coords)


def _check_gradient_pieces(dims, coords):
    """Every model's gradient pieces cover every parameter entry once, for layers of uneven
    widths; the ranks that sum a group of blocks together agree on its positions."""
    for name in strategies.spec("grid3d").models:  # R-GCN's relation weights: matrices of one parameter
        options = {"relations": ("a__x__b", "b__y__a", "a__z__a")} if "relations" in options_of(name) else {}
        model = build_model(name, 6, 7, hidden=5, layers=3, **options)
        params = list(model.parameters())
        offset = {id(p): int(o) for p, o in zip(params, np.cumsum([0] + [p.numel() for p in params]))}
        layers = [layer.maths() for layer in model.layers]
        plans = {tuple(c.values()): reductions(grad_blocks(layers, dims, c), offset, dims, c) for c in coords}
        seen = np.concatenate([share(positions, sums, dims, c) for c in coords
                               for positions, sums in plans[tuple(c.values())]])
        assert sorted(seen.tolist()) == list(range(sum(p.numel() for p in params))), name
        for c in coords:
            for i, (positions, sums) in enumerate(plans[tuple(c.values())]):
                peers = coords if sums == (WHOLE,) else [{**c, axis: k} for axis in sums for k in range(dims[axis])]
                for peer in peers:
                    other, other_sums = plans[tuple(peer.values())][i]
                    assert np.array_equal(other, positions) and other_sums == sums, (name, c, i)


# -- parity ------------------------------------------------------------------------------------
def recorded(strategy):
    """``strategy`` (None: the single process) whose first synced gradients, those the first
    Adam step takes, are kept in ``strategy.first``: Adam is blind to a gradient's scale, so
    the losses and parameters alone would hardly see a gradient counted twice."""
    strategy = strategy or SingleProcess()
    sync, strategy.first = strategy.sync_gradients, {}

    def keep(model):
        sync(model)
        if not strategy.first:
            strategy.first.update({name: p.grad.detach().clone() for name, p in model.named_parameters()})

    strategy.sync_gradients = keep
    return strategy


def train(graph, cfg, strategy=None):
    strategy = recorded(strategy)
    return {**parity.train(graph, cfg, strategy), "grads": strategy.first}


def assert_same(got, want, model):
    """``assert_same_run``, but GIN's eps, a scalar that starts at 0 and moves about lr per
    Adam step, is compared relative to max(|eps|, lr): where an eps ends near 0, its own size
    would hold float32 rounding of the steps that brought it there against almost nothing."""
    lr = config(2, model).resolved().training.lr
    scalars = [name for name in want["params"] if name.endswith(".eps")]
    strip = (lambda run: {**run, "params": {k: v for k, v in run["params"].items() if k not in scalars}})
    assert_same_run(strip(got), strip(want))
    for name in scalars:
        diff = float((got["params"][name] - want["params"][name]).abs())
        scale = max(float(want["params"][name].abs()), lr)
        assert diff <= 1e-5 * scale, f"parameter {name}: difference {diff:.3g} (scale {scale:.3g})"
    np.testing.assert_array_equal(got["accs"], want["accs"])
    for name, value in want["grads"].items():
        diff, scale = float((got["grads"][name] - value).abs().max()), float(value.abs().max())
        assert diff <= 1e-5 * scale, f"first gradient of {name}: max difference {diff:.3g} (scale {scale:.3g})"


@pytest.fixture(scope="module")
def reference():
    graph = make_graph()
    return {(model, layers): train(graph, config(layers, model)) for model in GRID3D_MODELS for layers in (2, 3, 4)}


def test_one_rank_equals_single_process(reference):
    graph = make_graph()
    for model in GRID3D_MODELS:
        for layers in (2, 3, 4):
            for permute, blocks in ((True, 1), (False, 3), (True, 50)):
                got = train(graph, config(layers, model),
                            Grid3D(layout("grid3d", "1,1,1"), "cpu", permute=permute, blocks=blocks, seed=1))
                assert_same(got, reference[model, layers], model)


def _runs(world):
    """Every model on every grid of ``world`` ranks, varying depth, permutation and row
    blocks (shifted per model, so that each model meets every setting). On 8 ranks (ten
    grids, slow to run on few cores) every model on 2x2x2 and each other grid with one model."""
    runs = [(model, grid, 2 + j % 2, j % 3 != 2, 1 + j % 3)
            for m, model in enumerate(GRID3D_MODELS) for i, grid in enumerate(grids(world)) for j in [i + m]]
    if world == 8:
        others = [g for g in grids(world) if g != (2, 2, 2)]
        runs = [r for r in runs if r[1] == (2, 2, 2) or
                GRID3D_MODELS.index(r[0]) == others.index(r[1]) % len(GRID3D_MODELS)]
    return runs


def _rank_parity(rank, world):
    graph = make_graph()
    out = {}
    for model, grid, layers, permute, blocks in _runs(world):
        strategy = Grid3D(layout("grid3d", ",".join(map(str, grid))), "cpu", permute=permute, blocks=blocks, seed=1)
        out[model, grid] = train(graph, config(layers, model), strategy)
    if world == 8:
        out["bytes"] = _rank_bytes()
    if world == 4:
        out["collectives"] = _rank_collectives(rank, world)
    return out


def _predicted(model, grid, widths, n, forwards, backwards):
    """Bytes (summed over ranks) of the per-layer collectives of an epoch. Layer l sums its
    [n, D_l] aggregate over cols (every rank holds an n/G_rows x D_l/G_feats block, G_cols
    copies of each; SAGE stacks two, by A_mean and by I) and its [n, D_l+1] output over feats;
    backward, from layer 1 on, dL/dH over cols again and dL/dF over rows. Layer 0's input has
    no gradient, but GIN's eps scales it, so GIN sums dL/dH at layer 0 too. GIN's second
    linear map reduce-scatters its [n, D_l+1] product over cols by column blocks (the
    longest D_l+1/G_cols wide, each rank sending G_cols of them) and gathers the gradient."""
    dims = dict(zip(AXES, grid))
    out = dict.fromkeys(["aggregate_allreduce", "gemm_allreduce", "dh_allreduce", "df_allreduce",
                         "gemm2_reducescatter", "dz_allgather"], 0)
    stacked = 2 if model == "sage" else 1
    for layer in range(len(widths) - 1):
        r = roles(layer)
        g_rows, g_cols, g_feats = dims[r.rows], dims[r.cols], dims[r.feats]
        aggregate = stacked * n * widths[layer] * g_cols * (g_cols > 1)
        out["aggregate_allreduce"] += forwards * aggregate
        out["gemm_allreduce"] += forwards * n * widths[layer + 1] * g_feats * (g_feats > 1)
        if layer or model == "gin":
            out["dh_allreduce"] += backwards * aggregate
        if layer:
            out["df_allreduce"] += backwards * n * widths[layer] * g_rows * (g_rows > 1)
        if model == "gin" and g_cols > 1:
            block = n * -(-widths[layer + 1] // g_cols) * g_cols * g_feats
            out["gemm2_reducescatter"] += forwards * block * g_cols
            out["dz_allgather"] += backwards * block
    return {k: 4 * v for k, v in out.items()}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_every_grid_equals_single_process(reference, world):
    results = run_ranks(_rank_parity, world, timeout=580)
    graph = make_graph()
    for model, grid, layers, permute, blocks in _runs(world):
        want = reference[model, layers]
        widths = [graph.num_features] + [8] * (layers - 1) + [graph.num_classes]
        evals = EPOCHS // EVAL_EVERY
        predicted = _predicted(model, grid, widths, graph.num_nodes, EPOCHS + evals, EPOCHS)
        for rank, got in enumerate(results):
            run = got[model, grid]
            try:
                assert_same(run, want, model)
            except AssertionError as err:
                raise AssertionError(f"{model}, grid {grid}, {layers} layers, rank {rank} of {world}: {err}") from None
        for phase, value in predicted.items():
            assert sum(r[f"{phase}_bytes"] for r in run["extra"]) == value, (model, grid, phase)
    if world == 4:
        _check_collectives(results)
    if world == 8:
        _check_bytes(results[0]["bytes"])


# -- traffic -----------------------------------------------------------------------------------
def _rank_bytes():
    graph = random_graph(n=48, e=200, features=4, classes=4, seed=2)
    cfg = Config.of(model="gcn", epochs=2, seed=1, hidden=8, layers=2, dropout=0.0)
    return train(graph, cfg, Grid3D(layout("grid3d", "2,2,2"), "cpu", blocks=3, seed=1))["extra"]


def _check_bytes(extras):
    """48 nodes, widths 4 -> 8 -> 4 on a 2x2x2 grid: every cut is even, so every phase has a
    closed form. Per epoch: one training forward and backward, one evaluation forward."""
    n, (d0, d1, d2), g = 48, (4, 8, 4), 8
    want = _predicted("gcn", (2, 2, 2), (d0, d1, d2), n, forwards=2, backwards=1)
    # gradients: layer 0 (rows z, cols x, feats y) completes blocks of d1/2 x d0/2 weights
    # plus, on feats replica 0, d1/2 biases: 12 or 8 entries, reduce-scattered along Z (all
    # of the block counted); layer 1 (rows y, cols z, feats x): 4 x 4 weights + 2 biases or
    # not: 10 or 8. The world all-gather sends the longest piece, 12/2 + 10/2, from each rank.
    want["grad"] = 4 * ((4 * 12 + 4 * 8) + (4 * 10 + 4 * 8) + g * (6 + 5))
    for extra in extras:
        for phase, value in want.items():
            assert extra[f"{phase}_bytes"] == value, phase
        # nothing else moves but the logits and the metrics (a loss and three hit counts,
        # all-reduced over the world): in particular the input features are never gathered
        reported = sum(extra[f"{phase}_bytes"] for phase in Grid3D.reported_phases)
        assert extra["bytes_total"] == reported + 4 * g * (1 + 3)
        assert extra["aggregate_allreduce_messages"] == 2 * 3 * g * 2  # 3 row blocks each
        # the all-to-all moves each logit at most once per direction (two forwards, one
        # backward); backward also joins the feats replicas' shares of dL/dQ (n x d2 once)
        assert 4 * n * d2 < extra["logits_bytes"] <= 4 * 4 * n * d2
        assert extra["comm_time_max"] >= extra["comm_time_min"] >= 0


def _rank_collectives(rank, world):
    """Uneven all-gather (rows and columns) and reduce-scatter."""
    from gnnmesh.comm import Comm
    comm = Comm()
    counts = [2, 0, 1, 3]
    mine = torch.full((counts[rank], 2), float(rank))
    rows = comm.all_gather(mine, counts)
    cols = comm.all_gather(mine.t().contiguous(), counts, dim=1)
    total = torch.arange(sum(counts) * 2, dtype=torch.float32).view(-1, 2) * (rank + 1)
    piece = comm.reduce_scatter(total, counts)
    return rows, cols, piece, comm.take()["phases"]


def _check_collectives(results):
    counts = [2, 0, 1, 3]
    want_rows = torch.cat([torch.full((c, 2), float(r)) for r, c in enumerate(counts)])
    starts = np.cumsum([0] + counts)
    for rank, got in enumerate(results):
        rows, cols, piece, phases = got["collectives"]
        assert torch.equal(rows, want_rows) and torch.equal(cols, want_rows.t())
        full = torch.arange(sum(counts) * 2, dtype=torch.float32).view(-1, 2) * sum(range(1, 5))
        assert torch.equal(piece, full[starts[rank]:starts[rank + 1]])
        # padded to 3 rows: all-gathers send 3 x 2 floats, the reduce-scatter all 4 x 3 x 2
        assert phases["default"]["bytes"] == 4 * (6 + 6 + 24)


# -- command line -----------------------------------------------------------------------------
def _losses(path):
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cora_on_eight_ranks_from_the_command_line(data_root, tmp_path):
    common = ["train", "--dataset", "cora", "--data-root", str(data_root), "--epochs", "5", "--quiet"]
    single = run_cli(*common, "--metrics", str(tmp_path / "single.jsonl"), timeout=120)
    assert single.returncode == 0, single.stderr
    grid = run_cli(*common, "--nproc", "8", "--strategy", "grid3d", "--grid", "2,2,2", "--blocks", "2",
                   "--metrics", str(tmp_path / "grid.jsonl"), timeout=240)
    assert grid.returncode == 0, grid.stderr
    got, want = _losses(tmp_path / "grid.jsonl"), _losses(tmp_path / "single.jsonl")
    assert len(got) == 5 and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(got, want)), (got, want)
    record = json.loads((tmp_path / "grid.jsonl").read_text().splitlines()[-1])
    assert record["aggregate_allreduce_bytes"] > 0 and record["grad_bytes"] > 0
