"""A PyG export of your own model (``--model FILE.py:CLASS``): its source file and weights,
beside ``gnnmesh_view.py`` (``gnnmesh.edge_index_view``, the primitives on an ``edge_index``
in plain PyTorch) and copies of the model pieces a model file imports from ``gnnmesh.models``,
so that the model loads and runs where gnnmesh is not installed:

    import gnnmesh_view                      # from the export's directory
    model = gnnmesh_view.load("export/")     # model(x, edge_index, edge_weight=None)

The checkpoint names the model's class and records its file's sha256 and path, never its code:
the file comes from ``--model FILE.py:CLASS`` or, without it, from where the checkpoint's
record says (``gnnmesh.models.user_file``), and must be the file the model was trained from.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import torch

from . import edge_index_view
from .errors import ConfigError
from .models import base, row_wise, user, user_file

VIEW_FILE = "gnnmesh_view.py"
PIECES_DIR = "gnnmesh_models"
_PIECES = (base, row_wise)  # what a model file imports from gnnmesh.models, all plain torch


def model_name(checkpoint, state: dict, given) -> str:
    """The ``--model`` name of the checkpoint's own model: ``given``, else the file it was
    trained from, found where every reader of a checkpoint looks for it
    (``gnnmesh.models.user_file.resolve``); a file of other content is refused before it runs."""
    try:
        return user_file.resolve(checkpoint, state, given)
    except ConfigError as err:
        raise ConfigError(f"{Path(checkpoint)}: {err}") from None


def describe(name: str, args: str, header: dict) -> dict:
    """The model.json of a user's model trained as ``name`` with ``--model-args`` ``args``."""
    source = user.spec_file(name)
    if source is None:
        raise ConfigError(f"model {name}: a PyG export needs the model's source file (FILE.py:CLASS or a module "
                          "with a file)")
    header.update(user_model={"class": user.class_name(name), "source": source.name,
                              "sha256": user.file_hash(source), "args": user.parse_args(args or ""),
                              "view": VIEW_FILE, "pieces": PIECES_DIR})
    return header


def write(spec: dict, name: str, directory: Path) -> None:
    """The model's source, the stand-alone view and the model pieces, into ``directory``."""
    shutil.copyfile(user.spec_file(name), directory / spec["user_model"]["source"])
    shutil.copyfile(edge_index_view.__file__, directory / VIEW_FILE)
    (directory / PIECES_DIR).mkdir()
    for piece in _PIECES:
        shutil.copyfile(piece.__file__, directory / PIECES_DIR / Path(piece.__file__).name)


def files(spec: dict) -> list:
    """The files of a user-model export besides model.json and the weights."""
    recorded = spec.get("user_model")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("source"), str):
        raise ConfigError("model.json: field 'user_model' is not one an export writes")
    return [recorded["source"], VIEW_FILE] + [f"{PIECES_DIR}/{Path(p.__file__).name}" for p in _PIECES]


def load(directory: Path, spec: dict) -> torch.nn.Module:
    """The export's model, built by its own ``gnnmesh_view.load`` (the code a PyG user runs).
    A missing file or a source file that is not the one exported (by its sha256) is a
    ConfigError naming it, before any of it runs; an error raised by the model's own code
    stays its own."""
    for name in files(spec):
        if not (directory / name).is_file():
            raise ConfigError(f"{directory / name}: no such file; not a complete export of your model")
    source = directory / spec["user_model"]["source"]
    if user.file_hash(source) != spec["user_model"].get("sha256"):
        raise ConfigError(f"{source}: not the file the model was exported with (its sha256 differs from "
                          f"{directory / 'model.json'}'s)")
    return _run_loader(directory)


def _run_loader(directory: Path) -> torch.nn.Module:
    found = importlib.util.spec_from_file_location(f"gnnmesh_view_{abs(hash(str(directory.resolve())))}",
                                                   directory / VIEW_FILE)
    view = importlib.util.module_from_spec(found)
    found.loader.exec_module(view)
    return view.load(directory)
