"""``gnnmesh report``: pictures and a markdown summary of training runs' metrics files, and of
a plan written by ``gnnmesh plan --json`` beside what the runs measured (``gnnmesh.report``)."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    cmd = subparsers.add_parser("report", help="draw training runs (metrics files) and a plan as PNG "
                                "pictures with a markdown summary (needs gnnmesh[plot])")
    cmd.add_argument("runs", nargs="+", metavar="RUN.jsonl",
                     help="metrics files written by 'gnnmesh train --metrics FILE'; each is labelled by its "
                          "file name without the extension")
    cmd.add_argument("--plan", metavar="PLAN.json",
                     help="a plan written by 'gnnmesh plan --json FILE': its predicted epoch times, beside the "
                          "runs' measured ones")
    cmd.add_argument("--out", required=True, metavar="DIR",
                     help="directory to write report.md and the pictures into (created, or replaced if it "
                          "holds an earlier report)")
    return cmd


def run(args, argv=None) -> int:
    from ..report import SUMMARY, write_report
    report = write_report(args.runs, args.out, args.plan)
    print(f"report: {report.directory / SUMMARY} ({len(report.runs)} run{'s' if len(report.runs) > 1 else ''})")
    for picture in report.pictures:
        if picture.skipped:
            print(f"  {picture.file:<13} not drawn: {picture.skipped}")
        else:
            print(f"  {picture.file:<13} {picture.title.lower()}")
    return 0
