"""The registries are the one place a strategy, a partitioner, a model or a task is named: every
part of gnnmesh that needs them reads them, what they name exists, and no module lists their
names or compares a value against one of them."""

import ast
from pathlib import Path

import pytest

from gnnmesh import strategies, tasks
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models import registry as models
from gnnmesh.partition import registry as partitioners
from gnnmesh.train import Trainer

from tests.helpers import random_graph

PACKAGE = Path(__file__).resolve().parents[1] / "gnnmesh"


def test_every_reference_in_the_registry_imports():
    for key, spec in strategies.REGISTRY.items():
        for ref in (spec.factory, spec.planner, spec.parts, spec.partition_view):
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
PARTITIONER_NAMES = set(partitioners.names()) - STRATEGY_NAMES
NAMES = {"strategy": STRATEGY_NAMES, "partitioner": set(partitioners.names()), "model": set(models.names()),
         "task": set(tasks.names())}
# The registries, where their names are written.
HOMES = {PACKAGE / "strategies.py", PACKAGE / "partition" / "registry.py", PACKAGE / "models" / "registry.py",
         PACKAGE / "tasks.py"}
# Comparisons whose subject (its last name) holds a word of another vocabulary that a registered
# name happens to spell: a graph operator ("gcn"), the "auto" of a setting other than the
# strategy, a settings section ("partition").
OTHER_VOCABULARIES = {
    "op": "a graph operator (view.OPERATORS)", "normalisation": "a graph operator",
    "device": "the device, where 'auto' picks one", "chunks": "the chunk count, where 'auto' picks one",
    "where": "where the compiled kernels run ('auto')", "value": "a setting's own text, checked by its field",
    "reads": "the settings sections a strategy reads",
}


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
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in HOMES for hit in _lists_of_names(path)]
    assert not found, "name them through gnnmesh.strategies or gnnmesh.partition.registry:\n" + "\n".join(found)


def _subject(node) -> str:
    """The last name of a compared expression (``config.run.strategy``: "strategy";
    ``m["kind"]``: "kind"), "" for a literal."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript):
        key = node.slice
        return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else _subject(node.value)
    if isinstance(node, ast.Call):
        return _subject(node.func)
    return ""


def _literals(node) -> list:
    """The string literals ``node`` is, or holds as a literal tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _compared(tree):
    """(line, subjects, literals) of every comparison (==, !=, in, not in) and match case."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            yield node.lineno, {_subject(s) for s in sides} - {""}, [w for s in sides for w in _literals(s)]
        elif isinstance(node, ast.Match):
            values = [w for case in node.cases for p in ast.walk(case.pattern) if isinstance(p, ast.MatchValue)
                      for w in _literals(p.value)]
            yield node.lineno, {_subject(node.subject)} - {""}, values


def _comparisons_with_names(path: Path, root: Path = PACKAGE.parent):
    """Comparisons in ``path`` of a value against a registered name, as lines of the failure
    (``path`` named relative to ``root``)."""
    for line, subjects, words in sorted(_compared(ast.parse(path.read_text())), key=lambda c: c[0]):
        if subjects and subjects <= set(OTHER_VOCABULARIES):
            continue
        for kind, names in NAMES.items():
            for word in sorted(set(words) & names):
                yield f"{path.relative_to(root)}:{line}: compares with the {kind} name {word!r}"


def test_no_comparison_with_a_registered_name_outside_its_registry():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in HOMES
             for hit in _comparisons_with_names(path)]
    assert not found, ("ask the registry's spec (strategies, partition.registry, models.registry, tasks) "
                       "instead:\n" + "\n".join(found))


def test_the_checker_sees_comparisons_of_every_kind(tmp_path):
    fake = tmp_path / "gnnmesh" / "bad.py"
    fake.parent.mkdir()
    fake.write_text('if config.run.strategy == "single": pass\n'
                    'if method in ("rp", "contiguous"): pass\n'
                    'if "gat" != cfg.model.name: pass\n'
                    'if m["kind"] not in ["grid3d"]: pass\n'
                    'match task:\n    case "regression": pass\n'
                    'if op == "gcn" or chunks == "auto": pass\n')
    found = list(_comparisons_with_names(fake, tmp_path))
    assert [hit.split(": ", 1)[1] for hit in found] == [
        "compares with the strategy name 'single'", "compares with the partitioner name 'contiguous'",
        "compares with the partitioner name 'rp'", "compares with the model name 'gat'",
        "compares with the strategy name 'grid3d'", "compares with the task name 'regression'"]


def test_every_partitioner_named_has_its_implementation():
    for name, spec in partitioners.REGISTRY.items():
        assert callable(spec.load()), name
        assert spec.distributed is None or callable(partitioners.load(spec.distributed)), name
        assert spec.preset is None or callable(partitioners.load(spec.preset)), name
    assert partitioners.DEFAULT in partitioners.REGISTRY
    assert partitioners.DEFAULT_ON_BLOCKS in partitioners.names(distributed=True)


def test_the_checker_sees_a_list_of_strategies(tmp_path, monkeypatch):
    fake = tmp_path / "gnnmesh" / "bad.py"
    fake.parent.mkdir()
    fake.write_text('KINDS = ("partition", "grid3d")\nMETHODS = {"rp": 1, "hp": 2}\n')
    monkeypatch.setattr(__import__("sys").modules[__name__], "PACKAGE", fake.parent)
    assert len(list(_lists_of_names(fake))) == 2


def test_a_trainer_given_auto_says_where_auto_is_chosen():
    with pytest.raises(ConfigError, match="auto is chosen by the planner when training runs"):
        Trainer(Config.of(strategy="auto"), random_graph())
