"""The package's import graph: every import points down the layers (README, Layout), and no
module takes a private name from another package."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gnnmesh"

# Bottom to top; a module may import from its own layer's earlier entries and from lower layers.
LAYERS = [
    ["errors", "progress", "validate", "atomic", "memory", "launch", "host_store"],
    ["graph", "transforms", "datasets"],
    ["ops"],
    ["view", "models", "sampling"],
    ["comm"],
    ["layout"],
    ["partition", "parts"],
    ["parallel"],
    ["planner"],
    ["config", "train"],
    ["report"],
    ["commands", "cli", "__main__"],
]
RANK = {unit: (layer, position) for layer, units in enumerate(LAYERS) for position, unit in enumerate(units)}


def unit_of(module: str) -> str:
    """The top-level unit (package or module) of ``gnnmesh.<module>``."""
    return module.split(".")[0]


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
    monkeypatch.setattr(__import__(__name__), "PACKAGE", fake)
    found = list(imports(fake / "ops" / "bad.py"))
    assert found == [("parallel", ["build_strategy"]), ("datasets._build", ["x"])]
    assert RANK[unit_of(found[0][0])] > RANK["ops"]
