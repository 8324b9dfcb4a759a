"""Run a function on N real gloo ranks on localhost, with a hard timeout (never hangs)."""

from __future__ import annotations

import atexit
import functools
import gc
import os
import socket
import tempfile
import traceback

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Ranks fork from a server that has imported torch and gnnmesh once for the whole session,
# rather than each starting an interpreter and importing them (seconds a rank): the server
# runs no torch op, so no thread pool is forked. A rank takes the test's environment and
# working directory as they are at the launch, as a spawned rank would. torch._dynamo too:
# torch imports it on the first optimizer built (Optimizer.__init__ is wrapped to disable
# dynamo), two seconds of every training command and rank otherwise.
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "gnnmesh", "gnnmesh.comm", "gnnmesh.train",
           "gnnmesh.cli", "tests.dist"]


def freeze_imports() -> None:
    """Move every object alive now (torch's, gnnmesh's, the tests' modules) out of reach of
    the garbage collector's later passes. A full collection walks every tracked object: with
    torch and dynamo imported, about 300,000 of them and half a second on two shared cores,
    paid again by every ``gc.collect()`` (offload's memory baseline, one a training run) and
    every automatic full pass, in the tests' process and in each rank forked from the server
    (which imports this module last of PRELOAD, so its ranks and commands start frozen).
    Nothing frozen is garbage: a collection runs first. Unfrozen at exit, so that the
    interpreter's teardown frees them as it would (extensions report objects left alive)."""
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)


freeze_imports()


def preloaded_forkserver():
    """The forkserver context, its server told to import PRELOAD when it starts."""
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def adopt(environ: dict, cwd: str) -> None:
    """In a forked process: take the launching test's environment and working directory."""
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)


def _entry(rank, world_size, port, fn, args, out_dir, environ, cwd):
    adopt(environ, cwd)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    from gnnmesh import comm
    try:
        comm.init(torch.device("cpu"), timeout_s=30)
        result = fn(rank, world_size, *args)
        torch.save({"ok": result}, os.path.join(out_dir, f"{rank}.pt"))
    except BaseException:
        torch.save({"error": traceback.format_exc()}, os.path.join(out_dir, f"{rank}.pt"))
        raise
    finally:
        comm.shutdown()


# The running test's own timeout (pytest-timeout's), set by tests/conftest.py: a rank timeout
# that pytest's would pre-empt never fires, and its message (which ranks hung) is lost.
TEST_TIMEOUT = {"seconds": None}
TEARDOWN_S = 10  # what killing the ranks and reading their results may take after the timeout


def run_ranks(fn, world_size: int, *args, timeout: float = 120.0, fresh: bool = False) -> list:
    """``fn(rank, world_size, *args)`` on every rank; returns the per-rank results.

    ``fn`` must be importable (module level). Raises with the first rank's traceback on
    failure, and kills every rank after ``timeout`` seconds, which must end before the test's
    own timeout does. ``fresh``: each rank a new interpreter rather than a fork of the
    preloaded server, for what is set as a process starts (the allocator's settings) and a
    measurement no inherited allocator state may sway."""
    limit = TEST_TIMEOUT["seconds"]
    if limit and timeout + TEARDOWN_S > limit:
        raise ValueError(f"run_ranks(timeout={timeout:g}) under a test timeout of {limit:g} s never fires: "
                         f"lower it or raise the test's (@pytest.mark.timeout)")
    with tempfile.TemporaryDirectory() as out_dir:
        preloaded_forkserver()
        ctx = mp.start_processes(_entry, args=(world_size, free_port(), fn, args, out_dir, dict(os.environ),
                                               os.getcwd()), nprocs=world_size, join=False,
                                 start_method="spawn" if fresh else "forkserver")
        try:
            import time
            deadline = time.monotonic() + timeout
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{world_size} ranks did not finish within {timeout:.0f}s")
        except mp.ProcessRaisedException:
            pass
        except mp.ProcessExitedException:
            pass
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        records = {}
        for rank in range(world_size):
            path = os.path.join(out_dir, f"{rank}.pt")
            if os.path.exists(path):
                records[rank] = torch.load(path, weights_only=False)
        for rank, record in sorted(records.items()):
            if "error" in record:
                raise RuntimeError(f"rank {rank} failed:\n{record['error']}")
        missing = [r for r in range(world_size) if r not in records]
        if missing:
            raise RuntimeError(f"ranks {missing} left no result (killed or crashed)")
        return [records[r]["ok"] for r in range(world_size)]


@functools.lru_cache(maxsize=None)
def run_ranks_once(fn, world_size: int, *args, timeout: float = 120.0) -> list:
    """``run_ranks``, launched once per arguments in a session: tests that each check their
    part of one launch's results (a strategy, a setting) share it, so the ranks start and meet
    once for all of them. The arguments must be hashable; a launch that fails is not kept."""
    return run_ranks(fn, world_size, *args, timeout=timeout)
