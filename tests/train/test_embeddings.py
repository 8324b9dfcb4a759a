"""Learned input embeddings (--embed-dim): the featureless rows get input columns that a
row-sparse optimizer trains, each rank holding the rows its strategy holds; every strategy that
runs them gives the single process's losses; checkpoints keep the table with its optimizer
state by global id, so a run on 3 ranks resumes on 1 and predicts there exactly; what cannot
hold them is refused in one line."""

import functools
import gzip

import numpy as np
import pytest
import torch

from gnnmesh import checkpoint
from gnnmesh.config import Config
from gnnmesh.datasets import load
from gnnmesh.errors import ConfigError
from gnnmesh.graph import Graph
from gnnmesh.train import Trainer
from gnnmesh.train.embeddings import embedded_ids, initial_values
from gnnmesh.train.minibatch import MiniBatchTrainer
from gnnmesh.typed.union import NodeTypes

from tests.dist import run_ranks
from tests.helpers import random_graph, typed_graph

pytestmark = pytest.mark.usefixtures("one_thread")  # as on every rank (tests/conftest.py says why)

EPOCHS = 4
COUNTS = (40, 25, 15)


def typed() -> Graph:
    """``typed_graph()`` with its node types: a (5 features, labelled), b and c (none)."""
    graph = typed_graph()
    offsets = np.concatenate([[0], np.cumsum(COUNTS)])
    return graph.replace(meta={**graph.meta, "node_types": NodeTypes(("a", "b", "c"), offsets, (5, 0, 0), ("a",))})


def featureless() -> Graph:
    return random_graph(60, 240, 3).replace(x=None)


def config(**fields) -> Config:
    return Config.of(**{"model": "rgcn", "hidden": 8, "epochs": EPOCHS, "seed": 1, "embed_dim": 4, **fields})


def test_initial_values_depend_on_the_seed_and_the_id_alone():
    ids = np.array([3, 70_000, 5, 16_384])
    whole = initial_values(ids, 4, seed=2)
    for i, node in enumerate(ids):
        assert torch.equal(initial_values(np.array([node]), 4, seed=2)[0], whole[i])
    assert not torch.equal(initial_values(ids, 4, seed=3), whole)


def test_the_embedded_rows_are_the_featureless_ones():
    assert embedded_ids(typed()).tolist() == list(range(40, 80))
    assert embedded_ids(featureless()).tolist() == list(range(60))
    with pytest.raises(ConfigError, match="every node"):
        embedded_ids(random_graph())


def test_one_process_learns_the_rows_a_step_reaches_and_no_other():
    trainer = Trainer(config(), typed())
    start = trainer.input_embeddings.table.detach().clone()
    trainer.fit()
    table = trainer.input_embeddings.table.detach()
    moved = (table != start).any(dim=1)
    assert 0 < int(moved.sum()) < len(table) or bool(moved.all())
    # the model's input holds the table; the rows with features gain zero columns
    x = trainer.rank_data.x.detach()
    assert torch.equal(x[40:80, 5:], table) and not x[:40, 5:].any()
    # a row no step reached (zero gradient throughout) keeps its initial values
    untouched = ~moved
    assert torch.equal(table[untouched], start[untouched])


def test_a_row_without_a_path_to_a_training_node_is_never_updated():
    graph = typed()
    adj = graph.adj
    keep = ~((adj.row() >= 75) | (adj.indices >= 75))  # cut nodes 75..79 (type c) off the graph
    from gnnmesh.graph import Adjacency
    rel = adj.relations
    counts = torch.diff(rel.ptr)[keep]
    ids = rel.ids[torch.repeat_interleave(keep, torch.diff(rel.ptr))]
    from gnnmesh.relations import Relations
    cut = Adjacency.from_coo(adj.row()[keep], adj.indices[keep], adj.shape).with_relations(
        Relations(rel.names, torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)]), ids))
    trainer = Trainer(config(), graph.replace(adj=cut))
    start = trainer.input_embeddings.table.detach().clone()
    trainer.fit()
    assert torch.equal(trainer.input_embeddings.table.detach()[35:], start[35:])  # ids 75..79
    assert not torch.equal(trainer.input_embeddings.table.detach()[:35], start[:35])


def _losses(rank, world, fields, graph=typed):
    trainer_class = MiniBatchTrainer if fields.get("minibatch") else Trainer
    summary = trainer_class(config(nproc=world, **fields), graph()).fit()
    return [r.loss for r in summary.history] + [r.val_acc for r in summary.history]


@functools.lru_cache(maxsize=None)
def _single(fields: tuple, graph) -> list:
    """The single process's run for settings (sorted items), once per module: runs of
    several strategies compare with the same one."""
    return _losses(0, 1, dict(fields), graph)


def single(fields: dict, graph=typed) -> list:
    return _single(tuple(sorted(fields.items())), graph)


RUNS = [pytest.param(3, {"strategy": "partition", "partitioner": "rp", "dropout": 0.3}, id="partition"),
        pytest.param(3, {"strategy": "partition", "partitioner": "rp", "embed_optimizer": "adagrad",
                         "embed_lr": 0.05}, id="partition-adagrad", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "tensor", "dropout": 0.3}, id="tensor", marks=pytest.mark.slow),
        pytest.param(2, {"strategy": "offload", "dropout": 0.3}, id="offload", marks=pytest.mark.slow)]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,fields", RUNS)
def test_several_ranks_learn_the_single_process_embeddings(world, fields):
    alone = {k: v for k, v in fields.items() if k not in ("strategy", "partitioner")}
    want = single(alone)
    for rank, got in enumerate(run_ranks(_losses, world, fields, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"{fields} rank {rank}"


MINI = {"minibatch": True, "batch_size": 8, "fanouts": "3,3", "dropout": 0.3}


@pytest.mark.timeout(200)
@pytest.mark.parametrize("route,graph,model", [
    pytest.param("gdp", typed, "rgcn", id="gdp-rgcn"),
    pytest.param("dnp", featureless, "sage", id="dnp-sage", marks=pytest.mark.slow),
    pytest.param("nfp", typed, "rgcn", id="nfp-rgcn", marks=pytest.mark.slow)])
def test_mini_batches_on_several_ranks_sum_each_rows_gradient(route, graph, model):
    fields = {**MINI, "model": model}
    want = single(fields, graph)
    for rank, got in enumerate(run_ranks(_losses, 2, {"strategy": route, **fields}, graph, timeout=180)):
        assert got == pytest.approx(want, abs=1e-5), f"{route} rank {rank}"


def _train(rank, world, path, epochs, resume, predict=False):
    fields = {"strategy": "partition", "partitioner": "rp"} if world > 1 else {}
    trainer = Trainer(config(nproc=world, epochs=epochs, checkpoint=path, resume=resume, **fields), typed())
    summary = trainer.fit()
    ids, values = trainer.predict("logits")
    return [r.loss for r in summary.history], ids, values


@pytest.mark.timeout(200)
def test_a_checkpoint_moves_the_embeddings_and_their_optimizer_from_three_ranks_to_one(tmp_path):
    whole, _, _ = _train(0, 1, str(tmp_path / "whole.pt"), EPOCHS, False)
    path = str(tmp_path / "c.pt")
    ranks = run_ranks(_train, 3, path, 2, False, timeout=180)
    first = ranks[0][0]
    record = checkpoint.embeddings(checkpoint.load(path))
    assert record["ids"].tolist() == list(range(40, 80)) and record["last"].shape == (40, 4)
    assert set(record["optimizer"]["rows"]) == {"exp_avg", "exp_avg_sq"}
    # predictions of the checkpoint on one process are the 3 ranks' own
    alone = Trainer.from_checkpoint(path, typed(), weights="last")
    ids, values = alone.predict("logits")
    theirs = {int(i): v for _, got_ids, got in ranks for i, v in zip(got_ids, got)}
    assert np.allclose(values, np.stack([theirs[int(i)] for i in ids]), atol=1e-5)
    # resumed on one process, the run continues as one process's run of every epoch would
    rest, _, _ = _train(0, 1, path, EPOCHS, True)
    assert first + rest[len(first):] == pytest.approx(whole, abs=1e-5)


def test_a_damaged_embedding_table_in_a_checkpoint_is_one_line(tmp_path):
    path = tmp_path / "c.pt"
    Trainer(config(epochs=1, checkpoint=str(path)), typed()).fit()
    state = torch.load(path, weights_only=True)
    state["embeddings"]["last"] = state["embeddings"]["last"][:, :3]
    torch.save(state, path)
    with pytest.raises(ConfigError, match=r"c\.pt: the embeddings' last table is not 40 rows of 4"):
        Trainer.from_checkpoint(path, typed())
    state["embeddings"] = {"ids": "nodes"}
    torch.save(state, path)
    with pytest.raises(ConfigError, match="'embeddings' is not a table"):
        checkpoint.load(path)


@pytest.mark.parametrize("fields,message", [
    ({"strategy": "grid3d"}, "cannot learn input embeddings"),
    ({"minibatch": True, "model": "sage", "cache_memory": "1KiB", "strategy": "gdp"}, "stale rows")])
def test_what_cannot_hold_them_is_one_line(fields, message):
    graph = featureless()
    with pytest.raises(ConfigError, match=message):
        (MiniBatchTrainer if fields.get("minibatch") else Trainer)(config(**{"model": "gcn", **fields}), graph)


def test_a_graph_with_features_everywhere_is_refused():
    with pytest.raises(ConfigError, match="embed_dim.*features on every node"):
        Trainer(config(model="gcn"), random_graph())


# -- an ogbn-mag-layout directory, through the command line ------------------------------------------

def write_mag(root, seed: int = 0):
    """A small directory in ogbn-mag's layout: papers (features, labels, a split), authors and
    fields without features; cites, writes and has_topic."""
    rng = np.random.default_rng(seed)
    counts = {"paper": 40, "author": 30, "field_of_study": 8}

    def edges(src, dst, m):
        return "".join(f"{a},{b}\n" for a, b in zip(rng.integers(0, counts[src], m), rng.integers(0, counts[dst], m)))

    files = {"raw/num-node-dict": ",".join(counts) + "\n" + ",".join(map(str, counts.values())) + "\n",
             "raw/relations/paper___cites___paper/edge": edges("paper", "paper", 90),
             "raw/relations/author___writes___paper/edge": edges("author", "paper", 70),
             "raw/relations/paper___has_topic___field_of_study/edge": edges("paper", "field_of_study", 50),
             "raw/node-feat/paper/node-feat": "".join(",".join(f"{v:.4f}" for v in row) + "\n"
                                                      for row in rng.normal(size=(40, 6))),
             "raw/node-label/paper/node-label": "".join(f"{c}\n" for c in rng.integers(0, 3, 40))}
    order = rng.permutation(40)
    for name, part in zip(("train", "valid", "test"), np.split(order, [20, 30])):
        files[f"split/time/paper/{name}"] = "".join(f"{i}\n" for i in sorted(part))
    for rel, text in files.items():
        path = root / (rel + ".csv.gz")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode()))
    return root


def _mag_losses(rank, world, spec, fields):
    trainer_class = MiniBatchTrainer if fields.get("minibatch") else Trainer
    summary = trainer_class(config(nproc=world, embed_dim=16, **fields), load(spec, cache=False)).fit()
    return [r.loss for r in summary.history]


@pytest.mark.timeout(200)
@pytest.mark.parametrize("world,fields", [
    pytest.param(3, {"strategy": "partition"}, id="partition"),
    pytest.param(2, {"strategy": "tensor"}, id="tensor", marks=pytest.mark.slow),
    pytest.param(2, {"strategy": "offload"}, id="offload", marks=pytest.mark.slow),
    pytest.param(2, {"strategy": "gdp", "minibatch": True, "batch_size": 6, "fanouts": "4,4"}, id="gdp",
                 marks=pytest.mark.slow)])
def test_an_ogbn_mag_directory_trains_rgcn_with_embeddings_on_several_ranks(tmp_path, world, fields):
    spec = f"{write_mag(tmp_path / 'ogbn-small')}:add_reverse=true"
    assert load(spec, cache=False).meta["node_types"].widths == (6, 0, 0)
    alone = {k: v for k, v in fields.items() if k != "strategy"}
    want = _mag_losses(0, 1, spec, alone)
    for got in run_ranks(_mag_losses, world, spec, fields, timeout=180):
        assert got == pytest.approx(want, abs=1e-5)


def test_export_refuses_a_model_that_learned_embeddings(tmp_path):
    from gnnmesh.export import export_pyg
    path = tmp_path / "c.pt"
    Trainer(config(epochs=1, checkpoint=str(path)), typed()).fit()
    with pytest.raises(ConfigError, match="learned input embeddings.*gnnmesh predict"):
        export_pyg(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _link(rank, world, fields):
    from gnnmesh.link.trainer import LinkTrainer
    graph = random_graph(60, 300, 3, directed=False).replace(x=None)
    summary = LinkTrainer(config(model="gcn", task="link", nproc=world, epochs=3, **fields), graph).fit()
    return [r.loss for r in summary.history] + [r.val_acc for r in summary.history]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_link_prediction_on_a_featureless_graph_learns_the_same_embeddings_on_three_ranks():
    want = _link(0, 1, {})
    for got in run_ranks(_link, 3, {"strategy": "partition"}, timeout=180):
        assert got == pytest.approx(want, abs=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_command_line_trains_an_ogbn_mag_directory_with_embeddings_on_three_ranks(tmp_path):
    import json
    from tests.forked import run_cli
    spec = f"{write_mag(tmp_path / 'ogbn-small')}:add_reverse=true,cache=false"
    losses = {}
    for ranks in (1, 3):
        metrics = tmp_path / f"m{ranks}.jsonl"
        result = run_cli("train", "--dataset", spec, "--model", "rgcn", "--embed-dim", "16", "--epochs", "4",
                         "--nproc", ranks, "--strategy", "partition" if ranks > 1 else "single",
                         "--metrics", metrics, "--quiet", timeout=300)
        assert result.returncode == 0, result.stderr
        losses[ranks] = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()
                         if "loss" in json.loads(line)]
    assert len(losses[1]) == 4 and losses[3] == pytest.approx(losses[1], abs=1e-5)


# -- a checkpoint's embeddings are bad input until checked --------------------------------------------

DAMAGES = {
    "ids": [None, "ids", torch.tensor([1.5]), torch.arange(40).flip(0), torch.arange(40) + 1000,
            torch.zeros(40, dtype=torch.int64), torch.arange(39), torch.arange(40).reshape(4, 10)],
    "last": [None, [1.0], torch.zeros(40, 5), torch.zeros(40, 4, dtype=torch.int64),
             torch.full((40, 4), float("nan")), torch.zeros(0, 4)],
    "best": ["best", torch.zeros(3, 4), torch.full((40, 4), float("inf"))],
    "optimizer": [None, {}, {"kind": "sgd", "rows": {}, "shared": {}}, {"kind": "sparse_adam", "rows": [], "shared": {}},
                  {"kind": "sparse_adam", "rows": {"exp_avg": torch.zeros(2, 4)}, "shared": {"step": 1}},
                  {"kind": "sparse_adam", "rows": {}, "shared": {"step": "one"}}],
}


@pytest.fixture(scope="module")
def trained_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("embedded") / "c.pt"
    trainer = Trainer(config(epochs=2, checkpoint=str(path)), typed())
    trainer.fit()
    return path, trainer.predict("logits")[1]


@pytest.mark.parametrize("field,damage", [(f, i) for f, values in DAMAGES.items() for i in range(len(values))])
def test_a_damaged_embeddings_record_is_refused_in_one_line_or_read_exactly(trained_checkpoint, tmp_path, field, damage):
    source, want = trained_checkpoint
    state = torch.load(source, weights_only=True)
    state["embeddings"][field] = DAMAGES[field][damage]
    path = tmp_path / "c.pt"
    torch.save(state, path)
    try:
        got = Trainer.from_checkpoint(path, typed(), weights="last").predict("logits")[1]
    except ConfigError as err:
        assert "\n" not in str(err) and str(path) in str(err)
    else:  # only a record a run could have written reads, and then as it was written
        assert field == "best" and np.array_equal(got, want)
