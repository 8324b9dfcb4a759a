"""The commands: ``train``, ``predict`` (a trained model's outputs for every node), ``datasets``, ``partition`` (cut a graph among ranks, write per-rank
parts), ``plan`` (rank the strategies by predicted epoch time), ``report`` (draw runs and a
plan), ``export`` (a trained model as PyTorch Geometric layers) and ``check-model`` (a model of
your own against the single process, split among ranks). Each module has
``add_parser(subparsers)`` and ``run(args, argv)``; ``gnnmesh.cli`` builds the parser from them
and reports bad input."""

COMMANDS = ("train", "predict", "datasets", "partition", "plan", "report", "export", "check-model")
