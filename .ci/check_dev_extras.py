"""Import every package of the ``dev`` extra (pyproject.toml, nested extras included).

Exits non-zero, naming each missing package, so that CI fails instead of skipping the
tests that need one. A dev requirement with no import name below fails too: add it here.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# requirement name (normalized) -> the module it installs
IMPORT_NAMES = {
    "pytest": "pytest",
    "pytest-timeout": "pytest_timeout",
    "pytest-xdist": "xdist",
    "psutil": "psutil",
    "pymetis": "pymetis",
    "mtkahypar": "mtkahypar",
    "torch-geometric": "torch_geometric",
    "matplotlib": "matplotlib",
    "mkdocs": "mkdocs",
    "mkdocs-material": "material",
    "mkdocstrings": "mkdocstrings_handlers.python",  # mkdocstrings[python]: the handler the docs use
    "pyarrow": "pyarrow",
    "hypothesis": "hypothesis",
    "triton": "triton",
}
PROJECT = "gnnmesh"


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def dev_requirements(pyproject: Path) -> list:
    """The names of the ``dev`` extra's packages, the project's own extras expanded."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    names, todo, seen = [], ["dev"], set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in extras[extra]:
            name = _name(requirement)
            if name == PROJECT:
                todo += re.search(r"\[(.*?)\]", requirement).group(1).replace(" ", "").split(",")
            elif name not in names:
                names.append(name)
    return names


def main(pyproject: Path = Path(__file__).resolve().parents[1] / "pyproject.toml") -> int:
    missing, names = [], dev_requirements(pyproject)
    for name in names:
        module = IMPORT_NAMES.get(name)
        if module is None:
            missing.append(f"{name} (no import name known: add it to .ci/check_dev_extras.py)")
            continue
        try:
            importlib.import_module(module)
        except Exception as err:  # ImportError, or a broken install failing on import
            missing.append(f"{name} (import {module}: {type(err).__name__}: {err})")
    if missing:
        print(f"dev extra missing: {'; '.join(missing)}", file=sys.stderr)
        return 1
    print("dev extras:", ", ".join(names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
