"""Models written by the user: ``--model path/to/file.py:ClassName`` or
``--model package.module:ClassName``, built as ``ClassName(in_dim, num_classes, **options)``
with the options of ``--model-args key=value,...``.

The class is imported, not unpickled: ``--model`` runs the user's code, exactly as
``python file.py`` would, on every rank, from the directory the command runs in. A file is
imported once per process under a name of its own, so two files of the same name do not
collide.

A checkpoint of a user's model records its class's name and the sha256 and place of the file
that defines it, never the code: reading a checkpoint imports nothing, and the model is built
again from the ``--model`` (``model=``) its reader gives, or from the file it was trained
from found again, each checked against that record first (``gnnmesh.models.user_file``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Optional

from torch import nn

from ..errors import ConfigError

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*(\.[A-Za-z_][A-Za-z_0-9]*)*$")


def is_user_model(name: str) -> bool:
    """Whether ``name`` names a user's class ("file.py:Class" or "module:Class")."""
    return ":" in name


def check_spec(field: str, name: str) -> None:
    """ConfigError naming ``field`` unless ``name`` has the form of a user model's name."""
    where, _, attribute = name.rpartition(":")
    if not where or not _IDENTIFIER.match(attribute) or not (where.endswith(".py") or _IDENTIFIER.match(where)):
        raise ConfigError(f"config field '{field}': {name!r} is neither a built-in model nor FILE.py:CLASS or "
                          "package.module:CLASS")


def model_class(name: str) -> type:
    """The ``nn.Module`` subclass ``name`` ("file.py:Class" or "module:Class") names; a missing
    file, module or class, or a class that is not a module, is a ConfigError naming it."""
    check_spec("model", name)
    where, _, attribute = name.rpartition(":")
    module = _import_file(where) if where.endswith(".py") else import_module(where)
    obj = module
    for part in attribute.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"config field 'model': {where} has no class {attribute!r}")
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise ConfigError(f"config field 'model': {name} is not a torch.nn.Module subclass "
                          f"(a {type(obj).__name__})")
    return obj


def _import_file(path: str):
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config field 'model': {path}: no such file")
    resolved = file.resolve()
    key = "gnnmesh_user_model_" + hashlib.blake2b(str(resolved).encode(), digest_size=6).hexdigest()
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses and pickling look a class's module up by name
    try:
        spec.loader.exec_module(module)  # the user's code: its errors keep their traceback
    except BaseException as err:
        sys.modules.pop(key, None)
        note(err, f"raised while importing the model file {path}")
        raise
    return module


def import_module(name: str, where: str = "config field 'model'"):
    """The module ``name``; one that is not there is a ConfigError naming ``where`` it was
    asked for (a module it imports that is missing is the module's own error)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):  # the module itself, not one it imports
            raise ConfigError(f"{where}: no module named {name!r}") from None
        raise


def build(name: str, in_dim: int, num_classes: int, options: dict, cls: Optional[type] = None) -> nn.Module:
    """``Class(in_dim, num_classes, **options)``, the class ``name`` names (or ``cls``, already
    imported, under that name); an error raised by the user's code keeps its traceback, with a
    note naming the model."""
    cls = cls if cls is not None else model_class(name)
    try:
        inspect.signature(cls).bind(in_dim, num_classes, **options)
    except TypeError as err:
        raise ConfigError(f"config field 'model_args': {name} cannot be built as {cls.__name__}(in_dim, "
                          f"num_classes{''.join(f', {k}=...' for k in options)}): {err}") from None
    except ValueError:  # no signature to check (a builtin): the call says
        pass
    try:
        return cls(in_dim, num_classes, **options)
    except BaseException as err:
        note(err, f"raised by the model {name} while it was built with in_dim={in_dim}, "
                   f"num_classes={num_classes}, options {options}")
        raise


def name_of(model: nn.Module) -> str:
    """The ``--model`` name that builds ``model``'s class again: ``module:Class``, or
    ``FILE.py:Class`` for a class defined in a script or a file given by path."""
    return name_of_class(type(model))


def name_of_class(cls: type) -> str:
    """``name_of`` a model of class ``cls``."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if (cls.__module__ == "__main__" or cls.__module__.startswith("gnnmesh_user_model_")) and file:
        return f"{file}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def class_file(cls: type) -> Optional[Path]:
    """The file that defines ``cls``, as its module was imported from (None: none, a builtin)."""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return Path(file) if file else None


def spec_file(name: str) -> Optional[Path]:
    """The file that defines the model ``name`` (FILE.py:CLASS or module:CLASS), found without
    running it (a module's parent packages are imported to find it); None where there is none."""
    check_spec("model", name)
    where = name.rpartition(":")[0]
    if where.endswith(".py"):
        return Path(where)
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):  # a parent package missing, or not a package
        return None
    return Path(found.origin) if found is not None and found.origin and found.has_location else None


def file_hash(path: Optional[Path]) -> Optional[str]:
    """The sha256 of the file at ``path`` (None where there is no such readable file)."""
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def class_name(name: str) -> str:
    """The class part of a model's name: ``Net`` of ``models/net.py:Net``."""
    return name.rpartition(":")[2]


def parse_args(text: str, field: str = "model_args") -> dict:
    """``key=value,...`` as a dict; values are Python literals (numbers, booleans, quoted
    strings, lists) or, failing that, plain strings."""
    out: dict = {}
    if not text.strip():
        return out
    for item in _split(text):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ConfigError(f"config field '{field}': {item.strip()!r} is not key=value")
        if key in out:
            raise ConfigError(f"config field '{field}': {key!r} is given twice")
        value = value.strip()
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def _split(text: str) -> list:
    """``text`` split at the commas outside brackets and quotes."""
    items, depth, quote, start = [], 0, None, 0
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item for item in items if item.strip()]


def note(err: BaseException, text: str) -> None:
    """Add ``text`` under ``err``'s traceback: the user's error stays theirs, gnnmesh says where."""
    if hasattr(err, "add_note"):  # Python 3.11+: shown under the traceback
        err.add_note(f"gnnmesh: {text}")
