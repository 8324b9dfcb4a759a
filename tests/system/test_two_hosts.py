"""A real two-host job: two network namespaces joined by a veth pair, two ranks in each,
rendezvous over that link with torchrun; the result equals the single-process run, also
when each host holds only its own ranks' parts of the graph."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from tests.dist import free_port
from tests.forked import run_cli

SBM = "sbm:nodes=400,classes=3,features=12"


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = uuid.uuid4().hex[:6]
    hosts = [(f"gm{tag}a", f"va{tag}", "10.231.7.1"), (f"gm{tag}b", f"vb{tag}", "10.231.7.2")]
    try:
        for ns, _, _ in hosts:
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", hosts[0][1], "type", "veth", "peer", "name", hosts[1][1])
        for ns, dev, addr in hosts:
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as err:
        for ns, _, _ in hosts:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {err.stderr.strip()}")
    yield hosts
    for ns, _, _ in hosts:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def losses(path):
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


def write_host_parts(tmp_path) -> list:
    """Parts of SBM for 4 ranks, then one data directory per host holding the manifest and
    the folders of that host's two ranks only."""
    out = run_cli("partition", "--dataset", SBM, "--parts", "4", "--method", "rp",
                  "--write-parts", str(tmp_path / "parts"), timeout=120)
    assert out.returncode == 0, out.stderr
    hosts = []
    for node in range(2):
        host = tmp_path / f"host{node}"
        host.mkdir()
        shutil.copy(tmp_path / "parts" / "manifest.json", host)
        for rank in (2 * node, 2 * node + 1):
            shutil.copytree(tmp_path / "parts" / f"rank-{rank:05d}", host / f"rank-{rank:05d}")
        hosts.append(host)
    return hosts


def torchrun_on_two_hosts(two_hosts, tmp_path, per_host_args: list) -> None:
    """``gnnmesh train`` under torchrun on both hosts, two ranks each; host h adds
    ``per_host_args[h]`` and writes its metrics to dist<h>.jsonl (rank 0's host writes them)."""
    master = two_hosts[0][2]
    port = str(free_port())
    procs = []
    for node_rank, (ns, dev, _) in enumerate(two_hosts):
        env = dict(os.environ, GLOO_SOCKET_IFNAME=dev)
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node_rank),
               "--master-addr", master, "--master-port", port, "-m", "gnnmesh", "train",
               *per_host_args[node_rank], "--metrics", str(tmp_path / f"dist{node_rank}.jsonl")]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=150))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            outputs.append(p.communicate())
    report = "\n".join(f"--- node {i} (exit {p.returncode})\n{err[-2500:]}"
                       for i, (p, (_, err)) in enumerate(zip(procs, outputs)))
    assert all(p.returncode == 0 for p in procs), report


def single_process(tmp_path, *args) -> list:
    out = run_cli("train", *args, "--metrics", str(tmp_path / "single.jsonl"), timeout=120)
    assert out.returncode == 0, out.stderr
    return losses(tmp_path / "single.jsonl")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.slow
@pytest.mark.parametrize("from_parts", [False, True])
def test_two_hosts_two_ranks_each(two_hosts, tmp_path, from_parts):
    common = ["--epochs", "8", "--quiet"]
    want = single_process(tmp_path, *common, "--dataset", SBM)
    data = [["--parts", str(host)] for host in write_host_parts(tmp_path)] if from_parts else \
        [["--dataset", SBM, "--partitioner", "rp"]] * 2
    torchrun_on_two_hosts(two_hosts, tmp_path, [[*common, *d, "--strategy", "partition"] for d in data])
    got = losses(tmp_path / "dist0.jsonl")  # rank 0 writes metrics
    assert len(got) == 8 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, want))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_minibatch_features_spread_over_two_hosts(two_hosts, tmp_path):
    """Each host keeps half the feature rows; the others are read from the other host over
    the link, and training equals the single process's."""
    common = ["--dataset", SBM, "--epochs", "4", "--quiet", "--minibatch", "--fanouts", "5,5", "--batch-size", "64"]
    want = single_process(tmp_path, *common)
    torchrun_on_two_hosts(two_hosts, tmp_path, [[*common, "--strategy", "gdp"]] * 2)
    records = [json.loads(line) for line in (tmp_path / "dist0.jsonl").read_text().splitlines()]
    got = [r["loss"] for r in records]
    assert len(got) == 4 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(got, want))
    assert all(min(r["rank_remote_bytes"]) > 0 and min(r["rank_features_bytes"]) > 0 for r in records)
