"""``--precision``: the numeric precision of a run's forward passes.

Under ``bf16-mixed`` the forward pass (training, evaluation and prediction alike, so that the
metrics describe the model that was trained) runs under ``torch.autocast`` with bfloat16: the
dense products (``nn.Linear``, ``matmul``) compute in bfloat16, while parameters, gradients,
optimizer state and the loss stay float32. The graph primitives (``gnnmesh.ops``) take the
bfloat16 rows autocast hands them, compute in float32 and return the dtype they were given.
Backward and the optimizer step run outside the context, as torch recommends.

Rounding to bfloat16 (8 bits of mantissa) depends on the order a sum's terms are added in, which
differs between strategies: a run on several ranks equals the single process's under the same
precision only to a measured tolerance (the training guide states it), not to 1e-5.
"""

from __future__ import annotations

import contextlib

import torch

from ..errors import ConfigError

# The dtype each reduced precision computes its autocast products in (float32: none).
DTYPES = {"32": torch.float32, "bf16-mixed": torch.bfloat16}


def reduced(precision: str) -> bool:
    """Whether ``precision`` computes anything in less than float32."""
    return DTYPES[precision] != torch.float32


def check_device(precision: str, device: torch.device) -> None:
    """Refuse, in one line, a reduced precision that ``device`` cannot compute in."""
    if not reduced(precision):
        return
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"config field 'precision': {precision} runs on cpu or cuda, not {device.type}")
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"config field 'precision': {precision} needs a GPU with bfloat16 support "
                          f"({torch.cuda.get_device_name(device)} has none); use --precision 32")


def autocast(precision: str, device: torch.device):
    """The context a forward pass runs in under ``precision`` on ``device`` (a no-op for 32)."""
    if not reduced(precision):
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=DTYPES[precision])
