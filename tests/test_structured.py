"""The one JSON and TOML reader (gnnmesh.structured): nesting past MAX_DEPTH is a ValueError
(TooDeep), never a RecursionError, and every file gnnmesh reads goes through it."""

import ast
import io
from pathlib import Path

import pytest

from gnnmesh.structured import MAX_DEPTH, TooDeep, load_toml, loads_json
from tests.helpers import gnnmesh_in_process, one_error_line

PACKAGE = Path(__file__).resolve().parents[1] / "gnnmesh"


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
                                  '{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)])
def test_json_nested_too_deeply(text):
    with pytest.raises(TooDeep) as info:  # a ValueError, which every reader's message handles
        loads_json(text)
    assert isinstance(info.value, ValueError) and str(info.value) == f"nested more than {MAX_DEPTH} levels deep"


def test_json_as_deep_as_allowed_reads():
    assert loads_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


@pytest.mark.parametrize("text", ["a = " + "[" * 100_000 + "]" * 100_000, "a = " + "[" * 200 + "]" * 200,
                                  "[" + ".".join(["t"] * 3000) + "]\nx = 1\n"])
def test_toml_nested_too_deeply(text):
    with pytest.raises(TooDeep):
        load_toml(io.BytesIO(text.encode()))


def test_every_reader_parses_through_it():
    """No module but this one calls json.load(s) or tomllib: a new reader cannot forget the bound."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("structured.py", "edge_index_view.py"):  # the latter is copied into exports
            continue                                               # and imports nothing of gnnmesh
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    node.value.id == "json" and node.attr in ("load", "loads") or node.value.id == "tomllib"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_deep_config_file_is_one_line(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    one_error_line(gnnmesh_in_process("train", "--config", str(path)), str(path), "nested more than")
