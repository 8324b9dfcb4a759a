"""The tests mirror the package (Layout of the code): every package of gnnmesh has its folder in
tests/, every folder of tests/ is a package's (or one of the repository's own), and every
top-level test file names a top-level module, ``tests/test_<module>[_<aspect>].py``."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Folders of tests/ that mirror no package: checks of the repository and of whole runs.
OWN_FOLDERS = {Path("project"), Path("system")}


def packages(package: Path) -> set[Path]:
    """Every package under ``package`` that holds a module of its own (a package of data files,
    its ``__init__.py`` alone, has nothing to test apart)."""
    return {folder.parent.relative_to(package) for folder in package.rglob("__init__.py")
            if folder.parent != package and any(m.name != "__init__.py" for m in folder.parent.glob("*.py"))}


def folders_of_tests(tests: Path) -> set[Path]:
    return {folder.parent.relative_to(tests) for folder in tests.rglob("__init__.py") if folder.parent != tests}


def folders_missing(package: Path, tests: Path) -> set[Path]:
    return packages(package) - folders_of_tests(tests)


def folders_of_no_package(package: Path, tests: Path) -> set[Path]:
    """Test folders that are neither a package's nor the repository's own (nor inside them)."""
    def mirrors(folder: Path) -> bool:
        return folder.parts[0] in {own.parts[0] for own in OWN_FOLDERS} or (package / folder / "__init__.py").exists()
    return {folder for folder in folders_of_tests(tests) if not mirrors(folder)}


def top_level_files_of_no_module(package: Path, tests: Path) -> set[str]:
    modules = {m.stem for m in package.glob("*.py")} - {"__init__", "__main__"}

    def names_a_module(stem: str) -> bool:
        subject = stem.removeprefix("test_")
        return any(subject == m or subject.startswith(m + "_") for m in modules)
    return {f.name for f in tests.glob("test_*.py") if not names_a_module(f.stem)}


def test_every_package_has_its_test_folder():
    missing = folders_missing(ROOT / "gnnmesh", ROOT / "tests")
    assert not missing, f"packages without a folder (with __init__.py) in tests/: {sorted(map(str, missing))}"


def test_every_test_folder_is_a_packages():
    stray = folders_of_no_package(ROOT / "gnnmesh", ROOT / "tests")
    assert not stray, f"test folders that mirror no package: {sorted(map(str, stray))}"


def test_every_top_level_test_file_names_a_top_level_module():
    stray = top_level_files_of_no_module(ROOT / "gnnmesh", ROOT / "tests")
    assert not stray, f"top-level test files naming no gnnmesh/<module>.py: {sorted(stray)}"


def test_the_checks_see_what_breaks_the_rule(tmp_path):
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for path in ("__init__.py", "graph.py", "ops/__init__.py", "ops/spmm.py", "data/__init__.py"):
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text("")
    for path in ("__init__.py", "test_graph_io.py", "test_grap.py", "models/__init__.py", "project/__init__.py"):
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text("")
    assert folders_missing(package, tests) == {Path("ops")}  # data/ holds no module of its own
    assert folders_of_no_package(package, tests) == {Path("models")}
    assert top_level_files_of_no_module(package, tests) == {"test_grap.py"}
