"""Dataset options: declared per dataset with a type and default, given either as keyword
arguments or in a spec string ``name:key=value,key=value`` (the CLI form). Both go
through the same checks, so ``nodes=1e6`` works from the command line and from Python,
and a misspelt key is an error that lists the valid ones."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..validate import check_seed
from ..errors import GraphError

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", ""}


@dataclass(frozen=True)
class Option:
    default: Any
    type: type                       # bool, int, float or str
    help: str
    optional: bool = False           # None is allowed
    choices: Optional[Sequence] = None
    seed: bool = False               # a random seed: in the one range seeds have everywhere

    def describe(self) -> str:
        kind = "|".join(map(str, self.choices)) if self.choices else self.type.__name__
        return f"{kind}{' or none' if self.optional else ''}, default {self.default!r}: {self.help}"

    def coerce(self, key: str, value: Any, where: str) -> Any:
        bad = GraphError(f"{where}: option '{key}' expects {self.type.__name__}"
                         f"{' or none' if self.optional else ''}, got {value!r}")
        if isinstance(value, str) and self.type is not str:
            text = value.strip().lower()
            if self.optional and text in _NONE:
                return None
            value = self._from_text(text, bad)
        elif isinstance(value, os.PathLike):
            value = os.fspath(value)
        if value is None:
            if self.optional:
                return None
            raise bad
        value = self._from_python(value, bad)
        if self.choices is not None and value not in self.choices:
            raise GraphError(f"{where}: option '{key}' must be one of "
                             f"{', '.join(map(str, self.choices))}; got {value!r}")
        if self.seed:
            check_seed(value, f"{where}: option '{key}'")
        return value

    def _from_text(self, text: str, bad: GraphError):
        if self.type is bool:
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise bad
        try:
            return int(text.replace("_", "")) if self.type is int and text.lstrip("+-").isdigit() \
                else float(text)
        except ValueError:
            raise bad from None

    def _from_python(self, value, bad: GraphError):
        if self.type is bool:
            if isinstance(value, bool) or (hasattr(value, "dtype") and value.dtype == bool):
                return bool(value)
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise bad
        if self.type is str:
            if isinstance(value, str):
                return value
            raise bad
        if isinstance(value, bool):
            raise bad
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if self.type is int:
            if number != number or number != round(number):
                raise bad
            return int(value) if isinstance(value, int) else int(number)
        return number


COMMON = {
    # Every dataset accepts 'seed' so a trainer can pass its seed blindly: it seeds the
    # generators and is the default split_seed; datasets with a fixed split ignore it.
    "seed": Option(0, int, "random seed: generators' seed and the default split_seed", seed=True),
    "cache": Option(True, bool, "read/write the on-disk cache of processed graphs"),
    "cache_dir": Option(None, str, "cache directory (else $GNNMESH_CACHE, else ~/.cache/gnnmesh)",
                        optional=True),
    "random_labels": Option(0, int, "for a graph without labels: this many random classes and a "
                            "random 60/20/20 split (throughput runs on unlabeled graphs)"),
}
SPLIT = {
    "split_seed": Option(None, int, "seed of the random train/val/test split (default: seed)",
                         optional=True, seed=True),
    "train_frac": Option(0.6, float, "fraction of (each class's) nodes for training"),
    "val_frac": Option(0.2, float, "fraction for validation; the rest is the test set"),
}


def parse_spec(text: str) -> tuple[str, dict]:
    """``'rmat:nodes=1000,edges=1e4'`` -> ``('rmat', {'nodes': '1000', 'edges': '1e4'})``."""
    name, _, rest = text.partition(":")
    options: dict = {}
    for item in rest.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or not key:
            raise GraphError(f"spec '{text}': expected key=value, got '{item}'")
        if key in options:
            raise GraphError(f"spec '{text}': option '{key}' given twice")
        options[key] = value.strip()
    return name.strip(), options


def resolve(declared: dict, given: dict, where: str) -> dict:
    """Every declared option, set from ``given`` (checked and converted) or its default."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise GraphError(f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)}; valid options: "
                         f"{', '.join(sorted(declared))}")
    return {key: opt.coerce(key, given[key], where) if key in given else opt.default
            for key, opt in declared.items()}
