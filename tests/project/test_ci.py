"""CI fails when a dev extra is missing, instead of skipping the tests that need it."""

import importlib.util
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV_MODULES = ("pytest", "pytest_timeout", "xdist", "psutil", "torch_geometric", "pymetis", "mtkahypar", "matplotlib",
               "mkdocs", "material", "mkdocstrings_handlers.python", "pyarrow", "hypothesis", "triton")


@pytest.fixture()
def check():
    spec = importlib.util.spec_from_file_location("check_dev_extras", ROOT / ".ci" / "check_dev_extras.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def failing(check, monkeypatch):
    """The check's imports answered here, whatever this environment has installed (and without
    touching sys.modules, which pytest's own plugins import from): every module imports, except
    those added to the returned set."""
    missing = set()

    def import_module(name):
        if name in missing:
            raise ImportError(f"No module named {name!r}")
        return types.ModuleType(name)

    monkeypatch.setattr(check, "importlib", types.SimpleNamespace(import_module=import_module))
    return missing


def test_every_dev_extra_is_checked(check):
    names = check.dev_requirements(ROOT / "pyproject.toml")
    assert {"pytest-timeout", "psutil", "torch-geometric", "pymetis", "mtkahypar", "matplotlib",
            "mkdocs", "mkdocs-material", "mkdocstrings"} <= set(names)
    assert sorted(check.IMPORT_NAMES[n] for n in names) == sorted(DEV_MODULES)


def test_passes_when_every_dev_extra_imports(check, failing, capsys):
    assert check.main() == 0
    assert "pymetis" in capsys.readouterr().out


@pytest.mark.parametrize("module", DEV_MODULES)
def test_fails_naming_a_missing_dev_extra(check, failing, capsys, module):
    failing.add(module)
    assert check.main() != 0
    err = capsys.readouterr().err
    assert err.startswith("dev extra missing:") and f"import {module}:" in err
    assert sum(f"import {m}:" in err for m in DEV_MODULES) == 1  # only the missing one


def test_a_dev_requirement_without_an_import_name_fails(check, failing, tmp_path, capsys):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "gnnmesh"\n[project.optional-dependencies]\n'
                         'extra = ["somepkg>=1"]\ndev = ["pytest>=7", "gnnmesh[extra]"]\n')
    assert check.dev_requirements(pyproject) == ["pytest", "somepkg"]
    assert check.main(pyproject) != 0
    assert "somepkg (no import name known" in capsys.readouterr().err


def test_ci_checks_the_extras_after_installing_and_before_testing():
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = next(i for i, line in enumerate(lines) if line.startswith("pip install"))
    check = lines.index("python .ci/check_dev_extras.py")
    test = next(i for i, line in enumerate(lines) if line.startswith("python -m pytest"))
    assert install < check < test
    assert "set -euo pipefail" in lines  # a failed check stops the script


@pytest.mark.timeout(30)
def test_a_rank_timeout_the_test_timeout_would_pre_empt_is_refused():
    from tests.dist import run_ranks
    with pytest.raises(ValueError, match="never fires"):
        run_ranks(print, 2, timeout=25)


def _frozen(rank, world_size):
    import gc
    return gc.get_freeze_count()


@pytest.mark.timeout(60)
def test_the_imports_are_frozen_here_and_in_forked_ranks():
    """A full collection skips the import-time heap (tests.dist.freeze_imports): torch's alone
    is some 300,000 objects, which every gc.collect() of a run would otherwise walk."""
    import gc
    from tests.dist import run_ranks
    assert gc.get_freeze_count() > 100_000
    assert run_ranks(_frozen, 1, timeout=40)[0] > 100_000
