"""The file of a user's model across its checkpoint: what a checkpoint records of it
(``Trained.record``) and where every reader of the checkpoint finds it again (``resolve``:
``gnnmesh predict``, ``gnnmesh export``, ``gnnmesh.load``, ``Trainer.from_checkpoint`` and
``--resume`` alike).

A checkpoint records the model's name (``FILE.py:CLASS`` or ``module:CLASS``), the sha256 of
the file that defines it and that file's path relative to the checkpoint's directory, never
the code. The file of a ``FILE.py:CLASS`` model is, in this order: the ``--model`` given (as
given); the recorded path from the checkpoint's directory; the recorded name from the current
directory; the file of its name beside the checkpoint. So a checkpoint moved with its model
file, keeping where one is from the other, predicts from any directory. A ``module:CLASS``
model is found by its name, as Python imports it.

A file is read for its sha256 before anything imports it. A file found but not given is
used only where its sha256 is the recorded one (a checkpoint that records none names no file
to run: its model must be given); a file of another content is one line saying it changed
since training.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from torch import nn

from .. import checkpoint as checkpoints
from ..errors import ConfigError
from . import user

_GIVE = "give the file it was trained from with --model FILE.py:CLASS (model= in Python)"


@dataclass(frozen=True)
class Trained:
    """A user's model as a run trains it: its name, the file its class is defined in (None:
    none) and that file's sha256 when training started."""

    name: str
    file: Optional[Path]
    sha256: Optional[str]

    @classmethod
    def of(cls, model: nn.Module, name: str) -> "Trained":
        file = user.class_file(type(model))  # as imported: made absolute now, whatever the directory later
        return cls(name, file.resolve() if file is not None else None, user.file_hash(file))

    def record(self, checkpoint=None) -> dict:
        """What the checkpoint written at ``checkpoint`` keeps of the model: the file's path is
        relative to the checkpoint's directory (None without a checkpoint's path or a file)."""
        relative = None
        if checkpoint is not None and self.file is not None:
            try:
                relative = Path(os.path.relpath(self.file.resolve(), Path(checkpoint).resolve().parent)).as_posix()
            except ValueError:  # on another drive: there is no relative path
                pass
        return checkpoints.user_model_record(self.name, self.sha256, relative)


def resolve(checkpoint, state: dict, given=None) -> Union[str, type]:
    """The model to build for the checkpoint at ``checkpoint`` (``state``: its content; None: a
    checkpoint whose place is not known, whose recorded name alone is looked up): ``given``
    (a name as ``--model`` gives it, or the class itself) once checked against the checkpoint's
    record, else the ``FILE.py:CLASS`` of the file found for it (see the module's docstring). A
    class of another name, a file of other content, or no file found is a ConfigError."""
    recorded = checkpoints.settings(state)["model"]
    expected = checkpoints.user_model_sha256(state)
    if given is not None:
        _check_given(recorded, expected, given)
        return given
    if expected is None:  # nothing to check a file against: none is run on the checkpoint's word
        raise ConfigError(f"it holds your own model {recorded} and records no sha256 of its file; a checkpoint "
                          f"never imports the code it names unchecked: give the model with --model "
                          f"FILE.py:CLASS (model= in Python)")
    tried, changed = [], None
    for name, file in _candidates(checkpoint, state, recorded):
        if file is None:  # a module Python does not find
            tried.append(f"the module {name.rpartition(':')[0]}")
            continue
        if any(isinstance(seen, Path) and _same(file, seen) for seen in tried):
            continue
        tried.append(file)
        if file.is_file():
            if user.file_hash(file) == expected:
                return name
            changed = changed or file
    if changed is not None:
        raise _changed(f"the model file {changed}", expected)
    raise ConfigError(f"it holds your own model {recorded} and its file is in none of the places looked in "
                      f"({', '.join(map(str, tried))}); {_GIVE}")


def _check_given(recorded: str, expected: Optional[str], given) -> None:
    """ConfigError unless ``given`` is a class of the recorded name, defined in a file of the
    recorded content where the checkpoint records its sha256 (checkpoints written before it
    was recorded: the name only). A file or module given by name is read, not run."""
    if isinstance(given, str):
        name, file = given, user.spec_file(given)
    elif isinstance(given, type) and issubclass(given, nn.Module):
        name, file = user.name_of_class(given), user.class_file(given)
    else:
        raise ConfigError(f"model: FILE.py:CLASS, module:CLASS or a torch.nn.Module subclass, got {given!r}")
    if user.class_name(name) != user.class_name(recorded):
        raise ConfigError(f"it holds the model {recorded}, not {name}")
    if not expected:
        return
    if file is None or not file.is_file():
        missing = f"{file}: no such file" if file is not None else "Python finds no file of it"
        raise ConfigError(f"--model {name}: {missing}; {_GIVE}")
    if user.file_hash(file) != expected:
        raise _changed(f"--model {name}: its file {file}", expected)


def _changed(what: str, expected: str) -> ConfigError:
    return ConfigError(f"{what} is not the one the model was trained from: it changed since training (sha256 "
                       f"{expected[:12]}... recorded); {_GIVE}")


def _candidates(checkpoint, state: dict, recorded: str) -> list:
    """``(name, file)`` for each place the recorded model's file may be, in order (file None:
    a module whose file Python does not find)."""
    where, _, cls = recorded.rpartition(":")
    if not where.endswith(".py"):  # a module: imported by its name, as Python finds it
        return [(recorded, user.spec_file(recorded))]
    if checkpoint is None:  # a checkpoint's content alone: only the recorded name is a place
        return [(recorded, Path(where))]
    found = []
    relative = checkpoints.user_model_file(state)
    if relative is not None:
        moved = os.path.normpath(Path(checkpoint).resolve().parent / relative)
        found.append((f"{moved}:{cls}", Path(moved)))
    found.append((recorded, Path(where)))
    beside = Path(checkpoint).parent / Path(where).name
    found.append((f"{beside}:{cls}", beside))
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
