"""The commands: ``train``, ``datasets``, ``partition`` (cut a graph among ranks, write per-rank
parts), ``plan`` (rank the strategies by predicted epoch time) and ``report`` (draw runs and a
plan). Each module has ``add_parser(subparsers)`` and ``run(args, argv)``; ``gnnmesh.cli``
builds the parser from them and reports bad input."""

COMMANDS = ("train", "datasets", "partition", "plan", "report")
