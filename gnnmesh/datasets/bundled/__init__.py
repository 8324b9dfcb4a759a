"""Datasets shipped inside the package (Cora and CiteSeer), laid out like a data root."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
