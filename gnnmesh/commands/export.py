"""``gnnmesh export``: a trained model (a checkpoint of ``gnnmesh train --checkpoint``) as files
another library rebuilds it from; ``--to pyg`` writes PyTorch Geometric's layers' description and
weights (``gnnmesh.export``)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    from ..export import TARGETS
    cmd = subparsers.add_parser("export", help="write a trained model as PyTorch Geometric layers "
                                "(model.json and weights.pt)")
    cmd.add_argument("--checkpoint", required=True, metavar="FILE",
                     help="checkpoint written by 'gnnmesh train --checkpoint FILE'")
    cmd.add_argument("--to", required=True, choices=TARGETS,
                     help="what to write: pyg (PyTorch Geometric layers, read back with gnnmesh.export.load_pyg)")
    cmd.add_argument("--out", required=True, metavar="DIR",
                     help="directory to write model.json and weights.pt into (created, or replaced if it "
                          "holds an earlier export)")
    cmd.add_argument("--model", metavar="FILE.py:CLASS",
                     help="a checkpoint of your own model: the file it was trained from (default: found as "
                          "predict finds it, where the checkpoint records it); written into the export with a "
                          "stand-alone view")
    cmd.add_argument("--weights", choices=("best", "last"), default="best",
                     help="the best-validation epoch's weights (default; what training reports) or the last "
                          "epoch's")
    return cmd


def run(args, argv=None) -> int:
    from ..export import DECODER_FILE, MODEL_FILE, WEIGHTS_FILE, export_pyg
    spec = export_pyg(args.checkpoint, args.out, args.weights, args.model)
    files, pairs = f"{MODEL_FILE}, {WEIGHTS_FILE}", ""
    if "decoder" in spec:  # a link model: its decoder scores pairs of the embeddings
        files, pairs = f"{files}, {DECODER_FILE}", f"; its {spec['decoder']['type']} decoder scores pairs"
    if "user_model" in spec:
        from ..export_user import VIEW_FILE
        own = spec["user_model"]
        print(f"exported {own['class']} ({args.weights} weights) to {args.out}: {files}, "
              f"{own['source']}, {VIEW_FILE} (read with gnnmesh_view.load or gnnmesh.export.load_pyg{pairs})")
        return 0
    form = f"decoupled {spec['model']}" if spec["decoupled"] else spec["model"]
    if "relations" in spec:  # a typed graph's model: each edge's relation is an input
        pairs = (f"{pairs}; called with edge_type, each edge's relation of {len(spec['relations'])}, as "
                 "gnnmesh.export.typed_inputs gives")
    print(f"exported {form} ({args.weights} weights) to {args.out}: {files} (read with gnnmesh.export.load_pyg{pairs})")
    return 0
