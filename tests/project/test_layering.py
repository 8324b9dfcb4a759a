"""The package's import graph: every import points down the layers (README, Layout), no two
modules import each other (directly or around a circle), and no module takes a private name
from another package. Every import counts, a function's own (lazy) imports included."""

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gnnmesh"

# Bottom to top; a module may import from its own layer's earlier entries and from lower layers.
LAYERS = [
    ["edge_index_view", "errors", "registries", "structured", "progress", "validate", "locks", "atomic", "checkpoint", "memory", "launch", "host_store"],
    ["graph", "transforms", "relations", "typed", "auc", "tasks", "datasets", "link.counter", "link.split", "link.sources", "link.decoders"],
    ["ops"],
    ["edge_features", "view", "models", "sampling"],
    ["comm"],
    ["strategies", "layout"],
    ["partition", "parts"],
    ["settings"],
    ["parallel"],
    ["planner"],
    ["config", "trained", "predict", "train", "link", "predict.run"],
    ["report", "export_user", "export"],
    ["commands", "cli", "__main__"],
]
RANK = {unit: (layer, position) for layer, units in enumerate(LAYERS) for position, unit in enumerate(units)}


def unit_of(module: str) -> str:
    """The unit of ``gnnmesh.<module>``: the longest leading part of its name that has a layer
    of its own (a module such as ``predict.run`` sits above the rest of its package), else its
    top-level package or module."""
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in RANK:
            return ".".join(parts[:end])
    return parts[0]


def imports(path: Path):
    """(imported module under gnnmesh, names taken from it) for every import in ``path``."""
    relative = path.relative_to(PACKAGE).with_suffix("")
    package = list(relative.parts[:-1])  # the package a relative import starts from
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else package
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("gnnmesh."):
                target = node.module[len("gnnmesh."):]
            else:
                continue
            names = [alias.name for alias in node.names]
            if not node.module:  # "from . import x": x is a module of that package
                for name in names:
                    yield f"{target}.{name}" if target else name, []
            else:
                yield target, names
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gnnmesh."):
                    yield alias.name[len("gnnmesh."):], []


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).with_suffix("")
        if relative.parts == ("__init__",):
            continue  # the package's own entry (version, lazy Graph)
        yield path, ".".join(relative.parts)


def test_every_unit_has_a_layer():
    units = {unit_of(name) for _, name in modules()}
    assert units <= set(RANK), f"give these a layer: {sorted(units - set(RANK))}"


def test_imports_point_down():
    upward = []
    for path, name in modules():
        mine = RANK[unit_of(name)]
        for target, _ in imports(path):
            theirs = RANK.get(unit_of(target))
            if theirs is not None and unit_of(target) != unit_of(name) and theirs > mine:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports running up the layers:\n" + "\n".join(upward)


def module_of(target: str, known: set) -> str:
    """The module ``target`` names (``a.b``, or the package ``a.b.__init__``); a name that is
    not a module is taken from its package's ``__init__``. '' for the package root."""
    while target:
        for candidate in (target, f"{target}.__init__"):
            if candidate in known:
                return candidate
        target = target.rpartition(".")[0]
    return ""


def import_graph() -> dict:
    """Every module's imports of other modules of the package."""
    found = dict((name, path) for path, name in modules())
    graph = {}
    for name, path in found.items():
        edges = set()
        for target, names in imports(path):
            edges |= {module_of(f"{target}.{n}", found.keys()) for n in names} | {module_of(target, found.keys())}
        graph[name] = edges - {"", name}
    return graph


def cycles(graph: dict) -> list:
    """The circles of ``graph`` (Tarjan's strongly connected components of more than one module)."""
    index, low, stack, found = {}, {}, [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            members = stack[stack.index(node):]
            del stack[stack.index(node):]
            if len(members) > 1:
                found.append(sorted(members))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "modules importing each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def names_a_module(target: str, names: list, known: set) -> bool:
    """Whether ``target`` is a module or package of ``known``; where nothing was taken from it
    by name (``from . import x``), ``x`` may be a name in its package instead."""
    exists = (lambda t: t in known or f"{t}.__init__" in known)
    return exists(target) or (not names and exists(target.rpartition(".")[0]))


def test_every_import_names_a_module_of_the_package():
    """A relative import that names no module (one left behind by a move) fails only when its
    function runs; here it fails at once."""
    known = {name for _, name in modules()} | {""}  # "": the package's own __init__
    missing = [f"{name} -> {target}" for path, name in modules() for target, names in imports(path)
               if not names_a_module(target, names, known)]
    assert not missing, "imports of modules that do not exist:\n" + "\n".join(missing)


def test_the_checker_sees_a_circle_and_a_lazy_upward_import(tmp_path, monkeypatch):
    """The tests above can fail: a circle closed by an import inside a function is found, and
    so is a lazy import from a higher layer."""
    fake = tmp_path / "gnnmesh"
    (fake / "datasets").mkdir(parents=True)
    (fake / "datasets" / "a.py").write_text("from .b import x\n")
    (fake / "datasets" / "b.py").write_text("def x():\n    from .a import y\n    from ..train import run\n"
                                            "    from .gone import z\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert cycles(import_graph()) == [["datasets.a", "datasets.b"]]
    assert not names_a_module("datasets.gone", ["z"], {"datasets.a", "datasets.b"})
    assert ("train", ["run"]) in list(imports(fake / "datasets" / "b.py"))


def test_no_private_names_across_units():
    found = []
    for path, name in modules():
        for target, names in imports(path):
            if unit_of(target) == unit_of(name):
                continue
            hidden = [n for n in names if private(n)]
            if hidden or any(private(part) for part in target.split(".")):
                found.append(f"{name} -> {target} {hidden}")
    assert not found, "private names imported from another package:\n" + "\n".join(found)


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The test above can fail: an import from a higher layer is reported."""
    fake = tmp_path / "gnnmesh"
    (fake / "ops").mkdir(parents=True)
    (fake / "ops" / "bad.py").write_text("from ..parallel import build_strategy\nfrom ..datasets._build import x\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    found = list(imports(fake / "ops" / "bad.py"))
    assert found == [("parallel", ["build_strategy"]), ("datasets._build", ["x"])]
    assert RANK[unit_of(found[0][0])] > RANK["ops"]


# -- who talks to torch.distributed ----------------------------------------------------------------
# The process group and its collectives go through ``comm`` (which counts what they move); the
# launcher's own modules (starting ranks, recording a rank's failure for the launcher) belong
# to the modules that launch.
LAUNCHER = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.distributed.run")
MAY_USE_DISTRIBUTED = {"comm": ("torch.distributed",), "launch": LAUNCHER, "cli": LAUNCHER}


def dotted(node) -> str:
    """``a.b.c`` of a chain of attributes on a name, else ''."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id] + parts[::-1]) if isinstance(node, ast.Name) else ""


def distributed_uses(path: Path) -> list:
    """Every torch.distributed module or attribute ``path`` imports or reaches (``torch.distributed.x``
    through ``import torch`` included), as dotted names."""
    tree = ast.parse(path.read_text())
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:
            found.append(dotted(node))
    return [name for name in found if name == "torch.distributed" or name.startswith("torch.distributed.")]


def forbidden_distributed(name: str, path: Path) -> list:
    allowed = MAY_USE_DISTRIBUTED.get(name, ())
    return [used for used in distributed_uses(path)
            if not any(used == prefix or used.startswith(prefix + ".") for prefix in allowed)]


def test_only_comm_talks_to_torch_distributed():
    found = [f"{name}: {used}" for path, name in modules() for used in forbidden_distributed(name, path)]
    assert not found, "torch.distributed used outside gnnmesh.comm:\n" + "\n".join(found)


def test_the_checker_sees_torch_distributed(tmp_path):
    """The test above can fail: every way of reaching torch.distributed is reported outside comm,
    and launch may start ranks but not reduce."""
    bad = tmp_path / "probe.py"
    bad.write_text("import torch\nimport torch.distributed as dist\nfrom torch import distributed\n"
                   "from torch.distributed import ReduceOp\n"
                   "def f(t, g):\n    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=g)\n")
    assert sorted(forbidden_distributed("planner.probe", bad)) == sorted([
        "torch.distributed", "torch.distributed.ReduceOp", "torch.distributed.all_reduce",
        "torch.distributed.ReduceOp.MAX", "torch.distributed"])
    assert forbidden_distributed("comm", bad) == []
    launcher = tmp_path / "launch.py"
    launcher.write_text("from torch.distributed.launcher.api import elastic_launch\nimport torch.distributed as dist\n")
    assert forbidden_distributed("launch", launcher) == ["torch.distributed"]
