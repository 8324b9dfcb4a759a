"""Flags made from the settings' own fields (``gnnmesh.settings``): every command that takes a
setting gets its flag, help, choices and type from one place."""

from __future__ import annotations

import argparse
import typing
from dataclasses import fields

from .. import strategies
from ..config import FIELDS, STRATEGY_SECTIONS, Config
from ..settings import SECTIONS, flag_name


def add_config_flags(parser, sections=None, only=None, defaults: bool = False, helps=None, required=()) -> None:
    """One flag per setting of ``sections`` (default: all; ``only``: just these settings, named
    as flags), with the help, choices and type its field declares; a setting left out of the
    command line stays None, so that a config file's value holds. The strategy sections form
    groups of their own. ``defaults``: each flag defaults to its field's default (or, for a
    strategy setting, the value it takes when read), for a command without a config file;
    ``helps``: help texts that say what a setting means to this command; ``required``: the
    settings this command cannot run without."""
    for name, cls in SECTIONS.items():
        if sections is not None and name not in sections:
            continue
        grouped = name in STRATEGY_SECTIONS and isinstance(parser, argparse.ArgumentParser)
        group = parser.add_argument_group(f"[{name}]", section_title(name)) if grouped else parser
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            flat = flag_name(f)
            if only is not None and flat not in only:
                continue
            flag = "--" + flat.replace("_", "-")
            kind = _flag_type(hints[f.name])
            choices = f.metadata.get("choices")
            if flat == "strategy":
                choices = strategies.names()
            help_text = (helps or {}).get(flat, f.metadata.get("help"))
            if flat == "strategy":
                help_text = "parallel strategy: " + "; ".join(f"{s}: {strategies.spec(s).summary}"
                                                              for s in strategies.names())
            default = None
            if defaults:
                default = f.default if f.default is not None else f.metadata.get("resolves_to")
            if kind is bool:
                group.add_argument(flag, dest=flat, action=argparse.BooleanOptionalAction, default=default,
                                   help=help_text)
            else:
                repeats = {"action": JoinedRepeats} if f.metadata.get("repeatable") else {}
                group.add_argument(flag, dest=flat, type=kind, default=default, choices=choices, help=help_text,
                                   metavar=None if choices else flat.upper(), required=flat in required, **repeats)


class JoinedRepeats(argparse.Action):
    """A list setting's flag given more than once (``--link-relation a --link-relation b``): its
    values joined by commas, the one value the setting takes (``a,b``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        before = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, values if before is None or before == self.default else f"{before},{values}")


def section_title(section: str) -> str:
    """Which strategies read a strategy section's settings, from the registry."""
    readers = [spec.name for spec in strategies.REGISTRY.values()
               if any(item.partition(".")[0] == section for item in spec.reads)]
    return "settings of --strategy " + ", ".join(dict.fromkeys(readers))


def _flag_type(hint):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    kind = args[0] if args else hint
    return kind if kind in (bool, int, float) else str




def config_from_args(args) -> Config:
    """The config of a command line: its --config file, then its flags over it."""
    config = Config.from_toml(args.config) if args.config else Config()
    flags = {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}
    return config.updated(**flags)


def start_ranks(nproc: int, argv, max_restarts: int = 0, min_nproc: "int | None" = None) -> "int | None":
    """Start ``--nproc`` local ranks running this command line and return the launcher's
    status; None where this process runs the command itself (one rank, or a rank of a job,
    whose size ``--nproc`` must then match). ``max_restarts``, ``min_nproc``: how often and
    on how few ranks the launcher starts the job again after a rank fails (``gnnmesh.launch``)."""
    from ..errors import ConfigError
    from ..launch import launched_rank, world_from_env
    world = world_from_env()
    if max_restarts and (nproc < 2 if world is None else not launched_rank()):
        raise ConfigError("config field 'max_restarts' needs 'nproc' of 2 or more: gnnmesh restarts the ranks it "
                          "starts (under torchrun, give --max-restarts to torchrun)")
    if world is None and nproc > 1:
        from ..launch import launch
        return launch(argv, nproc, max_restarts, min_nproc or 1)
    if world is not None and nproc > 1 and nproc != world[1]:
        raise ConfigError(f"--nproc {nproc} but the job has {world[1]} ranks (leave --nproc out "
                          "under torchrun)")
    return None
