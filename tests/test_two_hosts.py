"""A real two-host job: two network namespaces joined by a veth pair, two ranks in each,
rendezvous over that link with torchrun; the result equals the single-process run."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from dist import free_port

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


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_hosts_two_ranks_each(two_hosts, tmp_path):
    common = ["-m", "gnnmesh", "train", "--dataset", SBM, "--epochs", "8", "--quiet"]
    single = subprocess.run([sys.executable, *common, "--metrics", str(tmp_path / "single.jsonl")],
                            capture_output=True, text=True, timeout=120)
    assert single.returncode == 0, single.stderr
    master = two_hosts[0][2]
    port = str(free_port())
    procs = []
    for node_rank, (ns, dev, _) in enumerate(two_hosts):
        env = dict(os.environ, GLOO_SOCKET_IFNAME=dev)
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run",
               "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node_rank),
               "--master-addr", master, "--master-port", port,
               *common, "--strategy", "partition", "--partitioner", "rp",
               "--metrics", str(tmp_path / "dist.jsonl")]
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
    a, b = losses(tmp_path / "dist.jsonl"), losses(tmp_path / "single.jsonl")
    assert len(a) == 8 and all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(a, b))
