"""The registry of strategies is the one place a strategy is named: every part of gnnmesh that
needs the strategies reads it, and what it names exists."""

import ast
from pathlib import Path

import pytest

from gnnmesh import strategies
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.layout import ParallelLayout
from gnnmesh.partition.base import GRID_METHODS, LAYOUT_METHODS, METHODS, STOCHASTIC_METHODS

PACKAGE = Path(__file__).resolve().parents[1] / "gnnmesh"


def test_every_reference_in_the_registry_imports():
    for key, spec in strategies.REGISTRY.items():
        for ref in (spec.factory, spec.planner, spec.parts):
            if ref is not None:
                assert callable(strategies.load(ref)), f"{key}: {ref}"
        assert spec.factory or spec.name == "auto", f"{key} has no factory"


def test_every_section_a_strategy_reads_exists():
    from gnnmesh.settings import SECTIONS
    from dataclasses import fields
    for key, spec in strategies.REGISTRY.items():
        for item in spec.reads:
            section, _, name = item.partition(".")
            assert section in SECTIONS, f"{key} reads unknown section {section}"
            assert not name or name in {f.name for f in fields(SECTIONS[section])}, f"{key} reads {item}"


def test_the_command_line_offers_the_registry():
    from gnnmesh.cli import build_parser
    train = build_parser()._subparsers._group_actions[0].choices["train"]
    strategy = next(a for a in train._actions if a.dest == "strategy")
    assert tuple(strategy.choices) == strategies.names()
    assert all(strategies.spec(name).summary in strategy.help for name in strategies.names())


def test_layouts_split_what_the_registry_says():
    for name in strategies.names():
        layout = ParallelLayout.for_strategy(name, 8 if strategies.dims_of(name) else 1)
        assert set(layout.degrees()) == set(strategies.dims_of(name)), name
    with pytest.raises(ConfigError, match="does not split along cols"):
        ParallelLayout(cols=2, strategy="partition")


def test_an_unknown_strategy_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match="config field 'strategy': 'ring' is not one of single, partition"):
        Config.of(strategy="ring")


def test_models_a_strategy_refuses_are_refused_by_the_config():
    for key, spec in strategies.REGISTRY.items():
        if spec.models is None and spec.forms == ("plain", "decoupled"):
            continue
        engine = key.partition(":")[2]
        minibatch = spec.training == "minibatch"
        settings = {"strategy": spec.name, "minibatch": minibatch or None,
                    **({"host_store": "ram"} if engine == "host_store" else {})}
        refused = [m for m in ("gcn", "sage", "gat", "gin") if spec.models and m not in spec.models]
        for model in refused:
            with pytest.raises(ConfigError, match="config field 'model'"):
                Config.of(model=model, **{k: v for k, v in settings.items() if v is not None},
                          decoupled="plain" not in spec.forms or None)


STRATEGY_NAMES = set(strategies.names())
PARTITIONER_NAMES = set(METHODS + STOCHASTIC_METHODS + GRID_METHODS + LAYOUT_METHODS) - STRATEGY_NAMES


def _lists_of_names(path: Path):
    """Tuple, list, set and dict literals in ``path`` that hold two or more strategy names, or
    two or more partitioner names."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = node.keys
        else:
            continue
        words = {item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)}
        for kind, names in (("strategies", STRATEGY_NAMES), ("partitioners", PARTITIONER_NAMES)):
            if len(words & names) >= 2:
                yield f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {kind} {sorted(words & names)}"


def test_no_list_of_strategies_or_partitioners_outside_their_homes():
    homes = {PACKAGE / "strategies.py", PACKAGE / "partition" / "base.py", PACKAGE / "partition" / "methods.py"}
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in homes for hit in _lists_of_names(path)]
    assert not found, "name them through gnnmesh.strategies or gnnmesh.partition.base:\n" + "\n".join(found)


def test_every_partitioner_named_has_its_implementation():
    from gnnmesh.partition.methods import FUNCTIONS
    assert set(FUNCTIONS) == set(METHODS)


def test_the_checker_sees_a_list_of_strategies(tmp_path, monkeypatch):
    fake = tmp_path / "gnnmesh" / "bad.py"
    fake.parent.mkdir()
    fake.write_text('KINDS = ("partition", "grid3d")\nMETHODS = {"rp": 1, "hp": 2}\n')
    monkeypatch.setattr(__import__("sys").modules[__name__], "PACKAGE", fake.parent)
    assert len(list(_lists_of_names(fake))) == 2
