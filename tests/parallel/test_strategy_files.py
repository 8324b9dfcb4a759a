"""The contributor guide's table of each strategy's files (docs/contributing/layout.md) is true:
every file exists, none of the strategy's files is missing from its row, and each strategy is
read from at most 8 files in at most 3 folders unless its row says it is over."""

import re
from pathlib import Path

from gnnmesh import strategies
from tests.project.test_layering import PACKAGE, imports

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "contributing" / "layout.md"
MAX_FILES, MAX_FOLDERS = 8, 3
OVER = "*over*:"
# Shared by the strategies, so listed for none but its own (the guide says so above the table).
SHARED = {"parallel/strategy.py", "parallel/distributed.py", "parallel/factories.py", "parallel/agreed_partition.py",
          "parallel/single.py", "parallel/row_sums.py", "parallel/input_rows.py"}
# Strategies that run another strategy's engine once they have chosen it.
CHOOSERS = ("auto",)


def table(text: str) -> dict:
    """{strategy: (marked over, [files])} from the section "Each strategy's files"."""
    section = text.split("## Each strategy's files", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("strategy", "---"):
            continue
        rows[cells[0]] = (cells[1].startswith(OVER), re.findall(r"`([^`]+\.py)`", cells[1]))
    return rows


def module_file(module: str):
    """``a/b.py`` (relative to the package) of module ``gnnmesh.a.b`` or ``a.b``, or None for a package."""
    path = Path(*module.removeprefix("gnnmesh.").split("."))
    return f"{path}.py" if (PACKAGE / f"{path}.py").is_file() else None


def engine_closure(first: str) -> set:
    """The modules of ``parallel/`` the module ``first`` imports, directly or not (packages'
    ``__init__`` and the shared contract left out)."""
    seen, todo = set(), [first]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for target, names in imports(PACKAGE / path):
            for module in [target] + [f"{target}.{n}" for n in names]:
                found = module_file(module)
                if found and found.startswith("parallel/") and found not in SHARED:
                    todo.append(found)
    return seen


def named_by_registry(spec) -> set:
    """The modules the registry entry names: its parts writer, planner model and plan view."""
    refs = [spec.parts, spec.planner, spec.plan_view]
    return {module_file(ref.partition(":")[0]) for ref in refs if ref}


def problems(rows: dict) -> list:
    found = []
    for name, (over, files) in rows.items():
        missing = [f for f in files if not (PACKAGE / f).is_file()]
        found += [f"{name}: {f} does not exist" for f in missing]
        if missing or name not in strategies.REGISTRY:
            found += [] if name in strategies.REGISTRY else [f"{name}: no such registered strategy"]
            continue
        unlisted = (engine_closure(files[0]) | named_by_registry(strategies.REGISTRY[name])) - set(files)
        found += [f"{name}: {f} is one of its files but not listed" for f in sorted(unlisted)]
        folders = {str(Path(f).parent) for f in files}
        within = len(files) <= MAX_FILES and len(folders) <= MAX_FOLDERS
        if within == over:
            found.append(f"{name}: {len(files)} files in {len(folders)} folders, "
                         f"{'marked' if over else 'not marked'} over")
    return found


def test_the_guide_lists_every_strategy_that_has_an_engine():
    rows = table(GUIDE.read_text())
    wanted = {key for key, spec in strategies.REGISTRY.items() if spec.factory and spec.name not in CHOOSERS}
    assert wanted <= set(rows), f"strategies the guide does not list: {sorted(wanted - set(rows))}"


def test_each_strategys_files_are_true():
    assert not problems(table(GUIDE.read_text())), "\n".join(problems(table(GUIDE.read_text())))


def test_the_checker_sees_a_missing_a_forgotten_and_a_mismarked_file():
    """The test above can fail: a file that does not exist, an imported module left out, and a
    strategy within the goal marked over (or over it and not marked) are each reported."""
    row = "| tensor | `parallel/tensor/strategy.py`, `parallel/tensor/gone.py`, `planner/tensor.py` |"
    guide = f"## Each strategy's files\n\n| strategy | files |\n|---|---|\n{row}\n"
    assert problems(table(guide)) == ["tensor: parallel/tensor/gone.py does not exist"]
    row = "| tensor | `parallel/tensor/strategy.py`, `parallel/tensor/parts.py`, `planner/tensor.py` |"
    found = problems(table(guide.replace(guide.splitlines()[-1], row)))
    assert "tensor: parallel/tensor/layout_switch.py is one of its files but not listed" in found
    marked = {"single": (True, ["parallel/single.py", "planner/partition.py"])}
    assert problems(marked) == ["single: 2 files in 2 folders, marked over"]
    many = [f"parallel/minibatch/{m}.py" for m in ("strategy", "contract", "routes", "route_choice", "dryrun",
                                                   "exchange", "feature_homes")] + ["parallel/single.py", "parallel/strategy.py"]
    assert problems({"nfp": (False, many)}) == ["nfp: 9 files in 2 folders, not marked over"]
