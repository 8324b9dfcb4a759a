"""The CUDA paths against the CPU: ``python -m pytest -m cuda`` on a machine with a GPU.

Without one every test here is skipped, visibly. Tolerances: a GPU sums in another order than
the CPU (cuSPARSE and atomics), so float32 results agree to rounding, not bit for bit; after
a few epochs of Adam that is about 1e-4 relative in the loss, which is what is asked.
"""

import numpy as np
import pytest
import torch

from gnnmesh import datasets
from gnnmesh.config import Config
from gnnmesh.train import Trainer, train

from tests.helpers import model_fields, random_graph

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

MODELS = ["gcn", "sage", "gat", "gin", "decoupled-gcn", "decoupled-gat"]
EPOCHS = 5
LOSS_RTOL = 1e-4


def losses(config: Config, graph) -> list:
    return [r.loss for r in train(config, graph).history]   # in mini-batches under --minibatch


@pytest.mark.parametrize("model", MODELS)
def test_every_model_trains_on_the_gpu_as_on_the_cpu(model):
    graph = datasets.load("cora")
    config = Config.of(**model_fields(model), epochs=EPOCHS, seed=1)
    cpu, gpu = losses(config, graph), losses(config.updated(device="cuda"), graph)
    np.testing.assert_allclose(gpu, cpu, rtol=LOSS_RTOL)


@pytest.mark.parametrize("overlap", [True, False])
@pytest.mark.parametrize("store", ["ram", "file"])
def test_out_of_core_on_the_gpu_holds_its_budget_and_matches(store, overlap, tmp_path):
    """With the transfers on copy streams (overlap) and in line."""
    graph = datasets.load("cora")
    budget = 128 * 2**20  # above the floor on CUDA, which counts cuBLAS's workspaces (64 MiB on an H200)
    settings = dict(strategy="offload", device_memory="128MiB", host_store=store, epochs=EPOCHS, seed=1,
                    chunks="4", overlap=overlap, **({"store_dir": str(tmp_path)} if store == "file" else {}))
    cpu = losses(Config.of(**settings), graph)
    torch.cuda.reset_peak_memory_stats()
    gpu = losses(Config.of(**settings, device="cuda"), graph)
    np.testing.assert_allclose(gpu, cpu, rtol=LOSS_RTOL)
    assert torch.cuda.max_memory_allocated() <= budget


def test_out_of_core_on_the_gpu_holds_its_smallest_budget_with_everything_counted():
    """At the smallest budget the planner accepts, on a graph whose topology with the kernels'
    index arrays (about 150 MB) is more than that budget, everything the run puts on the GPU
    (setup included: labels, masks, the chunks' blocks and index arrays, cuBLAS's workspaces)
    stays within it."""
    from gnnmesh.parallel.offload.plan import BudgetTooSmall
    graph = datasets.load("rmat:nodes=200000,edges=4000000,features=32,classes=8")
    settings = dict(strategy="offload", host_store="ram", epochs=3, seed=1, device="cuda")
    with pytest.raises(BudgetTooSmall) as refused:
        Trainer(Config.of(**settings, device_memory="1MiB"), graph).fit()
    budget = int(1.05 * refused.value.least)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    gpu = losses(Config.of(**settings, device_memory=f"{budget}B"), graph)
    assert torch.cuda.max_memory_allocated() <= budget, (torch.cuda.max_memory_allocated(), budget)
    np.testing.assert_allclose(gpu, losses(Config.of(epochs=3, seed=1), graph), rtol=LOSS_RTOL)


def test_mini_batch_on_one_gpu():
    graph = datasets.load("cora")
    config = Config.of(minibatch=True, epochs=2, seed=1, batch_size=512)
    np.testing.assert_allclose(losses(config.updated(device="cuda"), graph), losses(config, graph), rtol=LOSS_RTOL)


@pytest.mark.parametrize("op", ["gcn", "mean", "sum", "loop"])
def test_kernels_on_the_gpu_equal_the_cpu(op):
    from gnnmesh.view import GraphView
    graph = random_graph(n=300, e=3000, features=16, weighted=True)
    x = torch.randn(300, 16, requires_grad=True)
    cpu_view, gpu_view = GraphView(graph.adj), GraphView(graph.adj, device="cuda")
    xg = x.detach().cuda().requires_grad_()
    out_c, out_g = cpu_view.spmm(x, op), gpu_view.spmm(xg, op)
    torch.testing.assert_close(out_g.cpu(), out_c, rtol=1e-5, atol=1e-5)
    out_c.square().sum().backward()
    out_g.square().sum().backward()
    torch.testing.assert_close(xg.grad.cpu(), x.grad, rtol=1e-4, atol=1e-5)
    s_c = cpu_view.sddmm(x[:, :4].detach(), x[:, 4:8].detach(), "loop", "add")
    s_g = gpu_view.sddmm(xg[:, :4].detach(), xg[:, 4:8].detach(), "loop", "add")
    torch.testing.assert_close(s_g.cpu(), s_c)
    torch.testing.assert_close(gpu_view.edge_softmax(s_g, "loop").cpu(), cpu_view.edge_softmax(s_c, "loop"),
                               rtol=1e-5, atol=1e-6)


def test_edge_softmax_on_the_gpu_is_the_same_every_run():
    """Its row sums are segmented reductions, not atomics: two runs agree bit for bit."""
    from gnnmesh.ops import edge_softmax
    from gnnmesh.ops.softmax import _softmax, _softmax_backward
    adj = datasets.load("rmat:nodes=20000,edges=400000,features=8").adj  # its index arrays go where the scores are
    scores = torch.randn(adj.nnz, 4, device="cuda")
    out = _softmax(adj, scores)
    assert torch.equal(out, _softmax(adj, scores))
    grad = torch.randn_like(out)
    assert torch.equal(_softmax_backward(adj, out, grad), _softmax_backward(adj, out, grad))
    torch.testing.assert_close(edge_softmax(adj, scores.cpu()), out.cpu(), rtol=1e-5, atol=1e-6)


def test_predict_on_the_gpu_equals_the_cpu(tmp_path):
    graph = datasets.load("cora")
    path = str(tmp_path / "c.pt")
    Trainer(Config.of(epochs=3, checkpoint=path), graph).fit()
    _, cpu = Trainer.from_checkpoint(path, graph).predict("embeddings")
    _, gpu = Trainer.from_checkpoint(path, graph, Config.of(device="cuda")).predict("embeddings")
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_the_planners_probe_runs_on_the_gpu():
    from gnnmesh.planner import probe
    rates = probe.probe_compute("cuda")
    assert rates is not None and probe.probe_host_bandwidth("cuda") > 0


@pytest.mark.parametrize("strategy", ["partition", "tensor", "grid3d", "offload", "gdp"])
def test_two_ranks_on_one_gpu_train_as_on_the_cpu(strategy, tmp_path):
    """Ranks beyond the GPUs share one, talking through gloo (NCCL refuses two ranks on one
    device); a job of one rank per GPU uses NCCL, which needs as many GPUs as ranks."""
    import json
    from tests.helpers import gnnmesh as run_cli
    flags = {"partition": ["--partitioner", "rp"], "offload": ["--partitioner", "rp", "--device-memory", "256MiB"],
             "grid3d": ["--grid", "1,1,2"], "tensor": [], "gdp": ["--minibatch"]}[strategy]
    runs = {}
    for device in ("cpu", "cuda"):
        metrics = tmp_path / f"{device}.jsonl"
        result = run_cli("train", "--dataset", "cora", "--device", device, "--nproc", "2", "--strategy", strategy,
                         "--epochs", "3", "--metrics", str(metrics), *flags, timeout=240)
        assert result.returncode == 0, result.stderr
        runs[device] = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    np.testing.assert_allclose(runs["cuda"], runs["cpu"], rtol=LOSS_RTOL)


def test_the_triton_kernels_equal_the_torch_path_and_repeat_bit_for_bit():
    """GAT's fused attention (with attention dropout's mask and without) and the weighted SpMM
    on the Triton kernels, forward and backward, against torch's ops on the GPU; every output
    the same bits on a second run (no atomics: the columns' sums read the stored transpose)."""
    pytest.importorskip("triton")
    from gnnmesh.ops import attention, compiled, fused, spmm
    adj = datasets.load("rmat:nodes=5000,edges=100000,features=8").adj  # rows from empty to thousands long
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    z = torch.randn(adj.shape[1], 4, 8, device=dev, generator=gen)
    s_dst, s_src = torch.randn(adj.shape[0], 4, device=dev, generator=gen), torch.randn(adj.shape[1], 4, device=dev,
                                                                                            generator=gen)
    keep = torch.rand(adj.nnz, 4, device=dev, generator=gen) > 0.4
    # two heads: a plain [N, F] product stays cuSPARSE's under GNNMESH_KERNELS=auto
    x, values = torch.randn(adj.shape[1], 2, 200, device=dev, generator=gen), torch.rand(adj.nnz, 2, device=dev,
                                                                                          generator=gen)
    cases = [(lambda z, d, s: attention(adj, z, d, s, 0.2), (z, s_dst, s_src)),
             (lambda z, d, s: attention(adj, z, d, s, 0.2, keep, 0.4), (z, s_dst, s_src)),
             (lambda v, x: spmm(adj, x, v), (values, x))]

    def run(fn, tensors):
        tensors = [t.detach().clone().requires_grad_() for t in tensors]
        out = fn(*tensors)
        weight = torch.randn(out.shape, device=dev, generator=torch.Generator(device=dev).manual_seed(1))
        return [out.detach(), *torch.autograd.grad((out * weight).sum(), tensors)]
    for fn, tensors in cases:
        assert fused.available(*tensors)
        first, second = run(fn, tensors), run(fn, tensors)
        with compiled.disabled():
            expected = run(fn, tensors)
        for i, (a, b, want) in enumerate(zip(first, second, expected)):
            assert torch.equal(a, b)
            # outputs to 1e-5; gradients sum over columns of thousands of entries, in another order
            torch.testing.assert_close(a, want, rtol=1e-5 if i == 0 else 1e-4, atol=1e-5)
