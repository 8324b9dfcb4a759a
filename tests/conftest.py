"""Shared fixtures."""

import os
from pathlib import Path

import pytest


def pytest_collection_finish(session):
    """Every test module is imported now: freeze what they brought too (tests.dist's
    ``freeze_imports`` says why)."""
    from tests.dist import freeze_imports
    freeze_imports()


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The shared real-data directory: $GNNMESH_DATA, else ``shared/data`` next to the repo."""
    root = Path(os.environ.get("GNNMESH_DATA") or
                Path(__file__).resolve().parents[2] / "shared" / "data")
    if not root.is_dir():
        pytest.skip(f"real datasets not available: {root} does not exist (set GNNMESH_DATA)")
    return root


@pytest.fixture(autouse=True)
def test_timeout(request):
    """The running test's timeout, for tests.dist.run_ranks to check its own against."""
    from tests.dist import TEST_TIMEOUT
    marker = request.node.get_closest_marker("timeout")
    TEST_TIMEOUT["seconds"] = float(marker.args[0]) if marker and marker.args else \
        float(request.config.getini("timeout") or 0) or None
    yield
    TEST_TIMEOUT["seconds"] = None


@pytest.fixture(scope="module")
def one_thread():
    """One compute thread for a module's in-process runs, as on every rank (tests.dist runs
    its ranks so): their graphs are tiny, so a second thread only adds a wake-up to every op,
    and on a busy machine each op then waits for a second core. Numerics are unchanged (a
    parallel product adds in the same order; GAT's scatter on one thread is deterministic)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Keep processed graphs out of the user's cache unless a cache dir is set explicitly
    (CI sets one); subprocesses started by tests inherit it."""
    if "GNNMESH_CACHE" not in os.environ:
        os.environ["GNNMESH_CACHE"] = str(tmp_path_factory.mktemp("gnnmesh-cache"))
    yield


@pytest.fixture
def stopped():
    """Processes to kill at the end whatever happens, so that no test leaves any behind."""
    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stderr and not proc.stderr.closed:
            proc.stderr.close()
