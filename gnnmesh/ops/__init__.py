"""Sparse kernels with autograd: the three primitives every model is written with."""

from .softmax import edge_softmax
from .spmm import spmm
from .sddmm import sddmm

__all__ = ["spmm", "sddmm", "edge_softmax"]
