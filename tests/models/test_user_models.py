"""Models that are not in the package (examples/) train under every strategy their contract
allows, equal to the single process; a strategy that cannot run one refuses it in one line."""

from pathlib import Path

import pytest
import torch

import gnnmesh
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.graph import Adjacency
from gnnmesh.models import GraphLayer, LayerStack, Maths, Term, user
from gnnmesh.train import Trainer
from gnnmesh.train.minibatch import MiniBatchTrainer
from gnnmesh.view import register_operator

from tests.dist import run_ranks
from tests.forked import run_script
from tests.helpers import random_graph
from tests.parity import assert_same_run, train

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
MODELS = {
    "gatv2": (f"{EXAMPLES / 'gatv2.py'}:GATv2", "hidden=4,heads=2,dropout=0.3"),
    "appnp": (f"{EXAMPLES / 'appnp.py'}:APPNPNet", "hidden=8,k=3,alpha=0.2"),
    "graphconv": (f"{EXAMPLES / 'graphconv.py'}:GraphConv", "hidden=8"),
}
# Every strategy each model's contract allows (and the settings it runs with here).
RUNS = {"partition": ["gatv2", "appnp", "graphconv"], "tensor": ["gatv2", "appnp", "graphconv"],
        "offload": ["gatv2", "graphconv"], "grid3d": ["graphconv"]}
SETTINGS = {"partition": {"partitioner": "rp"}, "tensor": {}, "grid3d": {},
            "offload": {"partitioner": "rp", "device_memory": "17MiB"}}
EPOCHS = 6


def make_graph():
    return random_graph(n=37, e=150, features=6, classes=3, directed=True, isolated=2)


def config(name: str, strategy: str = "single", **fields) -> Config:
    model, args = MODELS[name]
    return Config.of(model=model, model_args=args, epochs=EPOCHS, seed=1, strategy=strategy,
                     **SETTINGS.get(strategy, {}), **fields)


def _rank_run(rank, world, strategy):
    graph = make_graph()
    return {name: train(graph, config(name, strategy)) for name in RUNS[strategy]}


@pytest.fixture(scope="module")
def reference():
    graph = make_graph()
    return {name: train(graph, config(name)) for name in MODELS}


def check(results, reference):
    for name, got in results[0].items():
        assert_same_run(got, reference[name])


@pytest.mark.timeout(300)
def test_partition_on_two_ranks_equals_the_single_process(reference):
    check(run_ranks(_rank_run, 2, "partition", timeout=240), reference)


# Every strategy on 2 and 4 ranks (partition on 2: the test above; 1 and 3 ranks: the built-in
# models' matrices).
SLOW = {2: [s for s in RUNS if s != "partition"], 4: list(RUNS)}


def _rank_runs(rank, world, strategies):
    """Every strategy of ``strategies`` in one launch: the ranks start and meet once."""
    return {strategy: _rank_run(rank, world, strategy) for strategy in strategies}


@pytest.mark.slow
@pytest.mark.parametrize("ranks", sorted(SLOW))
@pytest.mark.timeout(600)
def test_every_allowed_strategy_equals_the_single_process_on(ranks, reference):
    results = run_ranks(_rank_runs, ranks, SLOW[ranks], timeout=540)
    for strategy in SLOW[ranks]:
        try:
            check([results[0][strategy]], reference)
        except AssertionError as err:
            raise AssertionError(f"{strategy} on {ranks} ranks: {err}") from None


REFUSED = [("appnp", "offload", "needs a LayerStack or a Decoupled model", "APPNPNet, a plain nn.Module"),
           ("appnp", "grid3d", "needs a LayerStack of GraphLayers only", "APPNPNet, a plain nn.Module"),
           ("gatv2", "grid3d", "needs a LayerStack of GraphLayers only", "GATv2, a LayerStack of GATv2Layer")]


@pytest.mark.parametrize("name,strategy,need,shape", REFUSED)
def test_a_strategy_refuses_a_model_it_cannot_run_naming_what_it_needs(name, strategy, need, shape):
    with pytest.raises(ConfigError) as err:
        _build(name, strategy)
    text = str(err.value)
    assert need in text and shape in text and MODELS[name][0] in text and "\n" not in text


def _build(name, strategy):
    """The trainer's model check for ``strategy`` on one process (grid3d and offload with one rank)."""
    return Trainer(config(name, strategy), make_graph())


def test_mini_batch_training_needs_a_layer_stack():
    with pytest.raises(ConfigError, match="--strategy single --minibatch needs a LayerStack"):
        MiniBatchTrainer(config("appnp", minibatch=True), make_graph())


def test_a_model_built_in_python_is_recorded_and_rebuilt_from_its_checkpoint(tmp_path):
    from examples.graphconv import GraphConv
    path = tmp_path / "c.pt"
    graph = make_graph()
    trainer = Trainer(Config.of(epochs=3, checkpoint=str(path)), graph, model=GraphConv(6, 3))
    trainer.fit()
    assert trainer.config.model.name == "examples.graphconv:GraphConv"
    model, config = gnnmesh.load(path, model=GraphConv)
    assert type(model) is GraphConv and config.model.name == "examples.graphconv:GraphConv"
    ids, values = Trainer.from_checkpoint(path, graph, model="examples.graphconv:GraphConv").predict()
    assert values.shape == (37, 3)
    with pytest.raises(ConfigError, match="holds the model examples.graphconv:GraphConv, not examples.gatv2:GATv2"):
        gnnmesh.load(path, model="examples.gatv2:GATv2")


def test_the_command_line_trains_resumes_and_predicts_a_users_model(tmp_path, capsys):
    model, args = MODELS["graphconv"]
    spec = "sbm:nodes=200,classes=3,features=6"
    base = ["--model", model, "--model-args", args, "--dataset", spec, "--checkpoint", str(tmp_path / "c.pt")]
    assert main(["train", *base, "--epochs", "2"]) == 0
    assert main(["train", *base, "--epochs", "4", "--resume"]) == 0
    assert main(["predict", "--checkpoint", str(tmp_path / "c.pt"), "--out", str(tmp_path / "p"),
                 "--model", model]) == 0
    assert "wrote logits (200 x 3 float32)" in capsys.readouterr().out


def _trained_from_a_copy(tmp_path):
    """A checkpoint of a model trained from ``net.py``, a copy of examples/graphconv.py."""
    source = tmp_path / "net.py"
    source.write_text((EXAMPLES / "graphconv.py").read_text())
    path = tmp_path / "c.pt"
    assert main(["train", "--model", f"{source}:GraphConv", "--dataset", "sbm:nodes=100,classes=3,features=6",
                 "--epochs", "1", "--checkpoint", str(path), "--quiet"]) == 0
    return source, path


def test_a_checkpoint_records_the_models_file_and_checks_the_one_given(tmp_path):
    source, path = _trained_from_a_copy(tmp_path)
    assert torch.load(path, weights_only=True)["user_model"]["sha256"] == user.file_hash(source)
    moved = tmp_path / "moved.py"  # where the file is does not matter, what it holds does
    moved.write_text(source.read_text())
    model, _ = gnnmesh.load(path, model=f"{moved}:GraphConv")
    assert type(model).__name__ == "GraphConv"
    marker = tmp_path / "ran"
    source.write_text(f"open({str(marker)!r}, 'w')\n" + source.read_text())
    with pytest.raises(ConfigError, match=r"--model \S+net.py:GraphConv: its file \S+net.py is not the one the "
                                          r"model was trained from: it changed since training \(sha256 "
                                          r"\w{12}\.\.\. recorded\); give the file it was trained from"):
        gnnmesh.load(path, model=f"{source}:GraphConv")
    assert not marker.exists()  # checked before it is imported


def test_a_changed_model_file_is_refused_in_one_line_by_predict_and_resume(tmp_path):
    from tests.helpers import gnnmesh_in_process, one_error_line
    source, path = _trained_from_a_copy(tmp_path)
    source.write_text(source.read_text() + "\n# changed\n")
    given = ["--model", f"{source}:GraphConv"]
    one_error_line(gnnmesh_in_process("predict", "--checkpoint", path, "--out", tmp_path / "p", *given),
                   str(path), "is not the one the model was trained from")
    one_error_line(gnnmesh_in_process("train", "--dataset", "sbm:nodes=100,classes=3,features=6", "--epochs", "2",
                                      "--checkpoint", path, "--resume", *given),
                   str(path), "is not the one the model was trained from")


def test_model_is_refused_for_a_checkpoint_of_a_built_in_model(tmp_path):
    from tests.helpers import gnnmesh_in_process, one_error_line
    path = tmp_path / "c.pt"
    Trainer(Config.of(epochs=1, checkpoint=str(path)), make_graph()).fit()
    one_error_line(gnnmesh_in_process("predict", "--checkpoint", path, "--out", tmp_path / "p",
                                      "--model", MODELS["graphconv"][0]),
                   f"{path}: it holds the built-in model gcn; --model is for a checkpoint of your own model")


BAD = {
    "missing file": (["--model", "nowhere.py:Net"], "nowhere.py: no such file"),
    "missing class": (["--model", f"{EXAMPLES / 'gatv2.py'}:GATv3"], "has no class 'GATv3'"),
    "missing module": (["--model", "no_such_package.models:Net"], "no module named 'no_such_package.models'"),
    "not a module": (["--model", f"{EXAMPLES / 'gatv2.py'}:F"], "is not a torch.nn.Module subclass"),
    "malformed": (["--model", "gcn2"], "'gcn2' is not one of gcn, sage, gat, gatv2, gin, gine, rgcn"),
    "bad args": (["--model", MODELS["gatv2"][0], "--model-args", "heads"], "'heads' is not key=value"),
    "built-in option": (["--model", MODELS["gatv2"][0], "--hidden", "4"], "config field 'hidden' applies to the "
                                                                           "built-in models"),
    "built-in option at its default": (["--model", MODELS["gatv2"][0], "--heads", "8"], "config field 'heads' applies "
                                                                                       "to the built-in models"),
    "args for a built-in": (["--model", "gcn", "--model-args", "a=1"], "applies to --model FILE.py:CLASS"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_model_input_is_one_line(case, capsys):
    flags, message = BAD[case]
    assert main(["train", "--dataset", "sbm:nodes=100,classes=3,features=6", "--epochs", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_an_error_in_the_users_code_keeps_its_traceback_and_names_the_model(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\n\nclass Net(torch.nn.Module):\n    def __init__(self, i, c, width=4):\n"
                      "        super().__init__()\n        self.lin = torch.nn.Linear(i, width)\n\n"
                      "    def forward(self, view, x):\n        return self.lin(x) @ torch.ones(5, 2)\n")
    with pytest.raises(ConfigError, match=r"cannot be built as Net\(in_dim, num_classes, depth=\.\.\.\): got an "
                       "unexpected keyword argument 'depth'"):
        Trainer(Config.of(model=f"{broken}:Net", model_args="depth=3"), make_graph())
    with pytest.raises(RuntimeError) as err:  # torch's, inside the user's constructor
        Trainer(Config.of(model=f"{broken}:Net", model_args="width=-1"), make_graph())
    assert any("raised by the model" in n for n in err.value.__notes__)
    with pytest.raises(RuntimeError) as err:
        Trainer(Config.of(model=f"{broken}:Net", epochs=1), make_graph()).fit()
    assert any(f"while running the model {broken}:Net" in n for n in err.value.__notes__)
    assert err.traceback[-1].path.name == "broken.py"


def test_model_args_are_python_literals():
    assert user.parse_args("hidden=8, alpha=0.5,name=gat2,flags=[1, 2],on=True,label='a,b'") == \
        {"hidden": 8, "alpha": 0.5, "name": "gat2", "flags": [1, 2], "on": True, "label": "a,b"}
    with pytest.raises(ConfigError, match="'k' is given twice"):
        user.parse_args("k=1,k=2")


def test_a_toml_table_gives_the_model_args(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(f'[model]\nname = "{MODELS["gatv2"][0]}"\nargs = {{ hidden = 4, heads = 2 }}\n')
    config = Config.from_toml(path)
    assert user.parse_args(config.model.args) == {"hidden": 4, "heads": 2}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("example,says", [("gatv2.py", "on cora: best val"), ("appnp.py", "on cora: best val"),
                                          ("graphconv.py", "on cora: best val"), ("pyg_data.py", "on a PyG Data"),
                                          ("four_ranks.py", "losses agree")])
def test_each_example_runs_as_a_script(example, says, tmp_path):
    result = run_script(EXAMPLES / example, cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    assert says in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gatv2_on_three_ranks_from_the_command_line_equals_the_single_process(tmp_path):
    from tests.helpers import gnnmesh as run_cli
    runs = {}
    for ranks in (1, 3):
        metrics = tmp_path / f"{ranks}.jsonl"
        result = run_cli("train", "--model", "examples/gatv2.py:GATv2", "--dataset", "cora", "--nproc", str(ranks),
                         "--strategy", "partition" if ranks > 1 else "single", "--epochs", "5",
                         "--metrics", str(metrics), *(["--partitioner", "rp"] if ranks > 1 else []), timeout=240)
        assert result.returncode == 0, result.stderr
        import json
        runs[ranks] = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert torch.allclose(torch.tensor(runs[3]), torch.tensor(runs[1]), rtol=1e-5, atol=0)


def test_strategy_auto_plans_a_users_model(capsys):
    """The planner traces the user's class as it traces the built-in models; a candidate that
    cannot run it is dropped with the reason."""
    model, args = MODELS["appnp"]
    assert main(["plan", "--dataset", "sbm:nodes=200,classes=3,features=6", "--nproc", "2", "--model", model,
                 "--model-args", args]) == 0
    out = capsys.readouterr().out
    assert "partition" in out and "grid3d" in out and "does not run" in out


# A normalisation gnnmesh does not ship: D^-1/2 A D^-1/2 without self-loops, registered by the
# module that defines the model (every rank imports it).
def _symmetric_no_loops(adj):
    mat = adj.to_scipy().tocsr()
    mat.setdiag(0)
    mat.eliminate_zeros()
    deg = torch.from_numpy(mat.sum(axis=1).A1).float().clamp(min=1)
    coo = mat.tocoo()
    values = deg[coo.row] ** -0.5 * deg[coo.col] ** -0.5
    return Adjacency.from_coo(torch.from_numpy(coo.row).long(), torch.from_numpy(coo.col).long(), adj.shape, values)


class SymmetricLayer(GraphLayer):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin = torch.nn.Linear(in_dim, out_dim)

    def maths(self):
        return Maths((Term("sym_no_loops", self.lin.weight),), self.lin.bias)


class SymmetricNet(LayerStack):
    def __init__(self, in_dim, num_classes, hidden=8):
        register_operator("sym_no_loops", _symmetric_no_loops)
        super().__init__(0.2)
        self.layers.extend([SymmetricLayer(in_dim, hidden), SymmetricLayer(hidden, num_classes)])


@pytest.fixture(autouse=True)
def _forget_registered_operators():
    """The operator a test model registers is this module's: other tests see only their own."""
    from gnnmesh.view import OPERATORS
    before = dict(OPERATORS)
    yield
    OPERATORS.clear()
    OPERATORS.update(before)


def _rank_operator(rank, world, strategy):
    return train(make_graph(), Config.of(model="tests.models.test_user_models:SymmetricNet", epochs=EPOCHS,
                                         seed=1, strategy=strategy, **SETTINGS[strategy]))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_registered_operator_runs_under_partition_as_on_one_process():
    want = train(make_graph(), Config.of(model="tests.models.test_user_models:SymmetricNet", epochs=EPOCHS, seed=1))
    assert_same_run(run_ranks(_rank_operator, 2, "partition", timeout=240)[0], want)


@pytest.mark.slow
@pytest.mark.parametrize("strategy,ranks", [("tensor", 2), ("grid3d", 4), ("offload", 2)])
@pytest.mark.timeout(300)
def test_a_registered_operator_runs_under_every_strategy(strategy, ranks):
    want = train(make_graph(), Config.of(model="tests.models.test_user_models:SymmetricNet", epochs=EPOCHS, seed=1))
    assert_same_run(run_ranks(_rank_operator, ranks, strategy, timeout=240)[0], want)


def test_an_operator_name_is_registered_once():
    with pytest.raises(ValueError, match="'gcn' is registered already"):
        register_operator("gcn", lambda adj: adj)


GUIDE_NEEDS = {"any module on the primitives": "primitives", "a `LayerStack` or a `Decoupled` model": "stages",
               "a `LayerStack` of `GraphLayer`s only": "maths", "a `LayerStack`": "layer_stack",
               "a `LayerStack` whose first layer is a `GraphLayer`": "first_maths",
               "a `Decoupled` model without attention": "propagation"}


def test_the_model_guide_says_what_each_strategy_needs():
    from gnnmesh import strategies
    guide = (ROOT / "docs" / "guides" / "models.md").read_text()
    table = guide.split("## What each strategy needs", 1)[1].split("\n\n")[2]
    seen = set()
    for row in table.splitlines()[2:]:
        who, needs = (cell.strip() for cell in row.strip("|").split("|")[:2])
        key = GUIDE_NEEDS[needs]
        for name in [w.strip("`,") for w in who.split() if w.strip("`,") in strategies.names()]:
            engine = "host_store" if "--host-store" in who else "minibatch" if "--minibatch" in who else ""
            spec = strategies.REGISTRY.get(f"{name}:{engine}", strategies.spec(name))
            assert spec.needs == key, f"the guide says {name} needs {key}, the registry {spec.needs}"
            seen.add((name, engine))
    assert {n for n, _ in seen} == set(strategies.names()), "every strategy has its row"


SHAPELESS = {
    "no parameters": ("class Net(torch.nn.Module):\n    def __init__(self, i, c):\n        super().__init__()\n\n"
                      "    def forward(self, view, x):\n        return view.spmm(x)\n",
                      "it has no parameters to train"),
    "one class too many": ("class Net(torch.nn.Module):\n    def __init__(self, i, c):\n        super().__init__()\n"
                           "        self.lin = torch.nn.Linear(i, c + 1)\n\n"
                           "    def forward(self, view, x):\n        return self.lin(x)\n",
                           "it gives 4 outputs per node; the classification task on dataset "),
}


@pytest.mark.parametrize("case", SHAPELESS)
def test_a_model_that_cannot_train_for_the_task_is_one_line_before_training(case, tmp_path):
    from tests.helpers import gnnmesh_in_process, one_error_line
    source, message = SHAPELESS[case]
    (tmp_path / "net.py").write_text("import torch\n\n" + source)
    metrics = tmp_path / "m.jsonl"
    one_error_line(gnnmesh_in_process("train", "--model", f"{tmp_path / 'net.py'}:Net", "--epochs", "2",
                                      "--dataset", "sbm:nodes=100,classes=3,features=6", "--metrics", metrics),
                   "config field 'model'", message)
    assert not metrics.exists() or metrics.read_text() == ""  # not one epoch recorded


def test_mini_batch_training_refuses_a_model_of_another_width():
    from examples.graphconv import GraphConv
    with pytest.raises(ConfigError, match="it gives 4 outputs per node; the classification task"):
        MiniBatchTrainer(Config.of(epochs=1, minibatch=True), make_graph(), model=GraphConv(6, 4)).fit()
