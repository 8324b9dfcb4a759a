"""The checkpoint format: what a training run writes (``written``, ``save``), how a file is
checked and brought to the current layout (``load``: ``structure_problem``, ``migrated``), and
what its readers take of it (``widths``, ``weights``, ``settings``, ``progress``, ``job``,
``user_model_sha256``, ``user_model_file``). No other module knows its keys.

Layout (``VERSION`` 3): ``version``; ``epoch``; ``model`` and ``optimizer``, their state dicts;
``schedule``, the learning-rate schedule's state (``gnnmesh.train.optim.LearningRate``: its
warm-up's and its scheduler's state dicts, each None where the run has none); ``best``, the
best-validation selection (epoch, val_acc, test_acc, its weights or None); ``history``, the
epoch records; ``config``, the flat settings; ``widths``, the model's input width and number
of classes; ``job``, the elastic job that wrote it (or None); ``user_model``, a user's model's
name, its file's sha256 and its file's path relative to the checkpoint's directory
(``user_model_record``; or None); and where the run learned input embeddings,
``embeddings`` (node ids, values, the optimizer's state: ``gnnmesh.train.embeddings``). Version 2 had no ``schedule`` (its runs had a constant rate);
version 1, the layout before it, had no ``version`` and might lack ``widths``, ``job`` and
``user_model``. Both are migrated on reading (version 1's widths read from the weights' shapes).
The file's path in ``user_model`` came later within version 3, an optional entry that older
readers pass over: a record without it reads as recording no path.

Checkpoints are written atomically (see ``gnnmesh.atomic``): a crash or a signal mid-write
never leaves a truncated checkpoint behind, nor (after the next run) a temporary file.
Reading one never runs code: it is unpickled by torch's weights-only loader, which builds
tensors, dicts, lists, tuples, numbers, strings and None and refuses anything else (a
pickle naming a function or class to call), and its structure is then checked against
the layout. A damaged, foreign or hostile file is a ConfigError naming it.
"""

from __future__ import annotations

import re
import warnings
import zipfile
import zlib
from numbers import Real
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from .atomic import atomic_file
from .errors import ConfigError

VERSION = 3  # the layout written; 1 (unversioned) and 2: the layouts before it, migrated on reading
WEIGHTS = ("best", "last")  # the best-validation model (what training reports), or the last epoch's


def written(*, epoch: int, model: dict, optimizer: dict, best: dict, history: list, config: dict,
            features: int, classes: int, job: Optional[str], user_model: Optional[dict] = None,
            schedule: Optional[dict] = None, embeddings: Optional[dict] = None) -> dict:
    """The checkpoint of a training run after ``epoch`` (see the module's docstring)."""
    state = {"version": VERSION, "epoch": epoch, "model": model, "optimizer": optimizer, "schedule": schedule,
             "best": best, "history": history, "config": config,
             "widths": {"features": features, "classes": classes}, "job": job, "user_model": user_model}
    if embeddings is not None:
        state["embeddings"] = embeddings
    return state


def save(path, state: dict) -> None:
    with atomic_file(path) as fh:  # an OSError (disk full) reaches the CLI, which names the file
        torch.save({k: _plain(v) if k in ("history", "config") else v for k, v in state.items()}, fh)


def load(path) -> dict:
    """The checkpoint at ``path``, checked to have the trainer's structure."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no checkpoint to resume from")
    damaged = _damaged_record(path)
    if damaged:
        raise ConfigError(f"{path}: unreadable checkpoint ({damaged})")
    try:
        with warnings.catch_warnings():  # e.g. on the pickle protocol of a foreign file
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for a damaged file
        raise ConfigError(f"{path}: unreadable checkpoint ({_reason(err)})") from None
    problem = structure_problem(state)
    if problem:
        raise ConfigError(f"{path}: not a gnnmesh checkpoint ({problem})")
    try:
        return migrated(state)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def _damaged_record(path: Path) -> str:
    """What is damaged in the zip archive ``torch.save`` writes ('' if nothing): a record whose
    bytes, as torch's reader reads them, do not match the CRC-32 the archive's directory holds
    for it. torch's loader does not compare them, so a flipped bit in a tensor (or in how a
    record is described) would load as other numbers. Records written without a CRC (torch's
    option to skip it) and files in torch's older, unzipped format go unchecked."""
    try:
        if not zipfile.is_zipfile(path):
            return ""
        with zipfile.ZipFile(path) as archive:
            described = {info.filename.split("/", 1)[-1]: info for info in archive.infolist()}
        reader = torch._C.PyTorchFileReader(str(path))
        for name in reader.get_all_records():
            info = described.get(name)
            if info is None:
                return f"record {name} is not in the archive's directory"
            if (info.CRC or not info.file_size) and zlib.crc32(reader.get_record(name)) != info.CRC:
                return f"record {name} does not match its CRC-32"
    except Exception as err:  # zipfile and torch raise several types for a damaged archive
        return f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
    return ""


def structure_problem(state) -> str:
    """What keeps ``state`` from being a checkpoint of a layout this version reads ('' if nothing)."""
    if not isinstance(state, dict):
        return f"holds {type(state).__name__}, not a dict"
    version = state.get("version", 1)
    if not (_count(version) and 1 <= version <= VERSION) or state.get("version") == 1:
        return f"format version {_show(version)}; this gnnmesh reads versions 1 (unversioned) to {VERSION}"
    missing = [k for k in ("epoch", "model", "optimizer", "best", "history", "config") if k not in state]
    missing += [k for k in ("widths", "job", "user_model") if version > 1 and k not in state]
    missing += [k for k in ("schedule",) if version > 2 and k not in state]
    if missing:
        return f"no {', '.join(repr(k) for k in missing)}"
    return next((problem for problem in (check(state) for check in _CHECKS) if problem), "")


def _progress_problem(state) -> str:
    if not _count(state["epoch"]):
        return "'epoch' is not a non-negative integer"
    if not _tensors(state["model"]):
        return "'model' is not a dict of tensors"
    optimizer = state["optimizer"]
    if not (isinstance(optimizer, dict) and isinstance(optimizer.get("state"), dict)
            and isinstance(optimizer.get("param_groups"), list)
            and all(isinstance(g, dict) for g in optimizer["param_groups"])):
        return "'optimizer' is not an optimizer's state"
    schedule = state.get("schedule")
    if schedule is not None and not (isinstance(schedule, dict) and all(
            isinstance(schedule.get(k), dict) or schedule.get(k) is None for k in ("warmup", "schedule"))):
        return "'schedule' is not a learning-rate schedule's state"
    best = state["best"]
    if not (isinstance(best, dict) and _count(best.get("epoch")) and _number(best.get("val_acc"))
            and _number(best.get("test_acc")) and (best.get("state") is None or _tensors(best["state"]))):
        return "'best' is not a model selection (epoch, val_acc, test_acc, state)"
    if not (isinstance(state["history"], list) and all(_record(r) for r in state["history"])):
        return "'history' is not a list of epoch records"
    return ""


def _record_problem(state) -> str:
    if not (isinstance(state["config"], dict) and all(isinstance(k, str) for k in state["config"])):
        return "'config' is not a dict of settings"
    widths = state.get("widths")  # None only in version 1, where it may be absent
    if (widths is not None or state.get("version", 1) > 1) and not (
            isinstance(widths, dict) and _count(widths.get("features")) and _count(widths.get("classes"))
            and widths["features"] and widths["classes"]):
        return "'widths' is not the model's input width and number of classes"
    if state.get("job") is not None and not isinstance(state["job"], str):
        return "'job' is not the id of the job that wrote it"
    user_model = state.get("user_model")  # a user's model: its name and its file's hash and path, never its code
    if user_model is not None and not (isinstance(user_model, dict) and isinstance(user_model.get("name"), str)
                                       and (user_model.get("sha256") is None or _sha256(user_model["sha256"]))
                                       and (user_model.get("file") is None or _relative(user_model["file"]))):
        return "'user_model' is not a model's name, sha256 and file"
    return ""


def _decoder_problem(state) -> str:
    saved = state.get("decoder")  # a link-prediction run's decoder, where it has one
    if saved is not None and not (isinstance(saved, dict) and _tensors(saved.get("last"))
                                  and (saved.get("best") is None or _tensors(saved["best"]))):
        return "'decoder' is not a decoder's last and best weights"
    return ""


def _embeddings_problem(state) -> str:
    saved = state.get("embeddings")  # learned input embeddings (--embed-dim), where the run had them
    if saved is None:
        return ""
    kept = saved.get("optimizer") if isinstance(saved, dict) else None
    if not (isinstance(saved, dict) and torch.is_tensor(saved.get("ids")) and torch.is_tensor(saved.get("last"))
            and (saved.get("best") is None or torch.is_tensor(saved["best"])) and isinstance(kept, dict)
            and _tensors(kept.get("rows")) and isinstance(kept.get("shared"), dict)
            and all(_number(v) for v in kept["shared"].values())):
        return "'embeddings' is not a table of node ids, values and optimizer state"
    return ""


_CHECKS = (_progress_problem, _record_problem, _decoder_problem, _embeddings_problem)


def migrated(state: dict) -> dict:
    """A checked checkpoint in the current layout: version 2 gets ``schedule`` None (its run's
    rate was constant); version 1 besides gets its version, ``job`` and ``user_model`` None
    where it has none, and its widths from its weights where it records none (every built-in
    model's first matrix is its first layer's [out, in] weight and its last bias the output
    layer's, one entry per class)."""
    if "version" in state:
        return {**state, "version": VERSION, "schedule": state.get("schedule")}
    widths = state.get("widths")
    if widths is None:
        first = next((t for t in state["model"].values() if t.dim() == 2), None)
        last = [t for name, t in state["model"].items() if name.endswith("bias") and t.dim() == 1]
        if first is None or not last:
            raise ConfigError("the checkpoint records no input width or number of classes")
        widths = {"features": int(first.shape[1]), "classes": int(last[-1].shape[0])}
    return {**state, "version": VERSION, "widths": widths, "job": state.get("job"),
            "user_model": state.get("user_model"), "schedule": None}


# -- what readers take of a checkpoint (checked and migrated by ``load``) ----------------------------

def widths(state: dict) -> tuple:
    """(input width, number of classes) of the model a checkpoint holds."""
    return int(state["widths"]["features"]), int(state["widths"]["classes"])


def weights(state: dict, which: str = "best") -> tuple:
    """(the model weights ``which`` names, the epoch they are from): the best-validation
    model falls back to the last one where none was selected (no evaluation ran)."""
    if which not in WEIGHTS:
        raise ConfigError(f"weights {which!r}: choose from {', '.join(WEIGHTS)}")
    best = state["best"]
    if which == "best" and best.get("state") is not None:
        return best["state"], int(best["epoch"])
    return state["model"], int(state["epoch"])


def settings(state: dict) -> dict:
    """The flat settings a checkpoint was written with (by flat name)."""
    return state["config"]


def progress(state: dict) -> tuple:
    """(epoch, model weights, optimizer state, best selection, epoch records): what a resumed
    run takes up."""
    return state["epoch"], state["model"], state["optimizer"], state["best"], state["history"]


def schedule(state: dict) -> Optional[dict]:
    """The learning-rate schedule's state (None: a checkpoint from before schedules)."""
    return state["schedule"]


def job(state: dict) -> Optional[str]:
    """The id of the elastic job that wrote the checkpoint, None outside one."""
    return state["job"]


def embeddings(state: dict) -> Optional[dict]:
    """A run's learned input embeddings: node ``ids``, their ``last`` and ``best`` values and
    the ``optimizer``'s state (``gnnmesh.train.embeddings``; None: the run learned none)."""
    return state.get("embeddings")


def decoder(state: dict) -> Optional[dict]:
    """A link-prediction run's decoder: its ``last`` and ``best`` state dicts (None: no decoder)."""
    return state.get("decoder")


def user_model_sha256(state: dict) -> Optional[str]:
    """The sha256 of the file a user's model was trained from, where the checkpoint records it."""
    return (state["user_model"] or {}).get("sha256")


def user_model_file(state: dict) -> Optional[str]:
    """The path, relative to the checkpoint's directory, of the file a user's model was trained
    from, where the checkpoint records it."""
    return (state["user_model"] or {}).get("file")


def user_model_record(name: str, sha256: Optional[str], file: Optional[str]) -> dict:
    """What a checkpoint keeps of a user's model (its ``user_model``): its name, the sha256 of
    its file and the file's path relative to the checkpoint's directory (None: unknown)."""
    return {"name": name, "sha256": sha256, "file": file}


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _sha256(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _relative(value) -> bool:
    """A relative path, as a string: a recorded file never names an absolute place."""
    return isinstance(value, str) and bool(value) and "\0" not in value and not Path(value).is_absolute()


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _number(value) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _tensors(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                           for k, v in value.items())


def _record(value) -> bool:
    return (isinstance(value, dict) and _count(value.get("epoch")) and _number(value.get("loss"))
            and all(isinstance(k, str) for k in value))


def _reason(err: Exception) -> str:
    """One line on why torch could not load a file."""
    text = " ".join(str(err).split())
    # torch names a refused call two ways: a global it does not allow, or one whose module it blocks
    refused = re.search(r"Unsupported global: GLOBAL (\S+)|unsupported GLOBAL (\S+) whose module", text)
    if refused:
        return (f"it asks to call {refused.group(1) or refused.group(2)}, which no checkpoint does; refused without "
                f"running it")
    detail = re.search(r"WeightsUnpickler error: (.*?)(?: Check the documentation|$)", text)
    text = detail.group(1) if detail else text
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def _plain(value):
    """``value`` with NumPy scalars made Python numbers, so that the epoch records (whatever
    a strategy reports) hold only what the weights-only loader reads back."""
    if isinstance(value, dict):
        return type(value)((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value
