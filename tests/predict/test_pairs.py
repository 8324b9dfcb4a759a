"""``--pairs FILE`` and ``--top-k K`` on the command line: a link model's pair scores and top-K
lists written and read back, and every bad input one line with exit status 2, nothing written."""

import numpy as np
import pytest

from gnnmesh import datasets
from gnnmesh.cli import main
from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.link.trainer import LinkTrainer
from gnnmesh.predict import read
from gnnmesh.predict.pairs import read_pairs_file
from gnnmesh.train import Trainer

SBM = "sbm:nodes=300,classes=4,features=12,seed=1"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A link checkpoint and a classification one, trained on the same graph."""
    root = tmp_path_factory.mktemp("models")
    graph = datasets.load(SBM)
    LinkTrainer(Config.of(dataset=SBM, task="link", epochs=2, hidden=8, checkpoint=str(root / "link.pt")), graph).fit()
    Trainer(Config.of(dataset=SBM, epochs=2, hidden=8, checkpoint=str(root / "nodes.pt")), graph).fit()
    return {"link": root / "link.pt", "nodes": root / "nodes.pt"}


def predict(capsys, *args) -> tuple:
    status = main(["predict", *map(str, args)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_pairs_file_with_a_header_comments_and_both_separators(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("src,dst\n# a comment\n3,4\n\n 5\t6 \n3,4  # again\n")
    np.testing.assert_array_equal(read_pairs_file(path, 10), [[3, 4], [5, 6], [3, 4]])
    path.write_text("3 4\n")  # no header
    np.testing.assert_array_equal(read_pairs_file(path, 10), [[3, 4]])


@pytest.mark.parametrize("text,message", [
    ("src,dst\n1,2\n3,10\n", "line 3: node id 10 is out of range (the graph has 10 nodes: 0 to 9)"),
    ("1,2\n-1,3\n", "line 2: node id -1 is out of range"),
    ("1,2.5\n", "line 1: '2.5' is not a node id (an integer)"),
    ("nan,1\n", "line 1: 'nan' is not a node id (an integer)"),
    ("1,2\n3,NaN\n", "line 2: 'NaN' is not a node id (an integer)"),
    ("1,2\n3\n", "line 2: '3' is not a pair source,destination (1 field)"),
    ("1,2,3\n", "line 1: '1,2,3' is not a pair source,destination (3 fields)"),
    ("source,destination\n# none\n", "lists no node pairs"),
    ("a,b\nc,d\n", "line 2: 'c' is not a node id (an integer)"),
])
def test_a_bad_pairs_file_names_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_pairs_file(path, 10)
    assert str(err.value).startswith(f"{path}{',' if 'line' in message else ':'} {message}")


def test_pairs_and_top_k_written_and_read_back(checkpoints, tmp_path, capsys):
    (tmp_path / "pairs.txt").write_text("source destination\n0 1\n299 3\n0 1\n")
    status, out, _ = predict(capsys, "--checkpoint", checkpoints["link"], "--pairs", tmp_path / "pairs.txt",
                             "--out", tmp_path / "p")
    assert status == 0 and "wrote scores (3 float32) of the pairs" in out
    got = read(tmp_path / "p")
    assert np.array_equal(got.ids, [0, 1, 2]) and np.array_equal(got.extra["pairs"], [[0, 1], [299, 3], [0, 1]])
    trainer = Trainer.from_checkpoint(checkpoints["link"], datasets.load(SBM))
    np.testing.assert_allclose(got.values, trainer.score_pairs([[0, 1], [299, 3], [0, 1]])[1], rtol=0, atol=1e-6)

    (tmp_path / "q.txt").write_text("7\n3\n")
    status, out, _ = predict(capsys, "--checkpoint", checkpoints["link"], "--top-k", 5, "--queries",
                             tmp_path / "q.txt", "--exclude-known", "--out", tmp_path / "t", "--format", "parquet")
    assert status == 0 and "wrote the 5 best candidates (2 x 5 float32 scores) of each query" in out
    got = read(tmp_path / "t")
    queries, candidates, scores = trainer.top_k(5, [3, 7], exclude_known=True)
    assert np.array_equal(got.ids, queries) and np.array_equal(got.extra["candidates"], candidates)
    np.testing.assert_allclose(got.values, scores, rtol=0, atol=1e-6)
    assert got.manifest["k"] == 5 and got.manifest["exclude_known"] is True
    assert not (got.extra["candidates"] == got.ids[:, None]).any()  # never the query itself

    status, out, _ = predict(capsys, "--checkpoint", checkpoints["link"], "--output", "embeddings",
                             "--out", tmp_path / "e")
    assert status == 0 and read(tmp_path / "e").values.shape == (300, 8)


@pytest.mark.parametrize("case", ["out of range", "not an integer", "nan", "negative", "top-k too large",
                                  "top-k too large known", "labels", "logits", "node model", "both",
                                  "queries alone", "output with pairs", "no pairs file"])
def test_bad_input_is_one_line_and_writes_nothing(checkpoints, tmp_path, capsys, case):
    pairs = tmp_path / "pairs.csv"
    pairs.write_text({"out of range": "0,1\n0,300\n", "not an integer": "0,1\n1,x2\n", "nan": "NaN,1\n",
                      "negative": "0,-3\n"}.get(case, "0,1\n"))
    link, out = checkpoints["link"], tmp_path / "p"
    args = {"out of range": ["--pairs", pairs], "not an integer": ["--pairs", pairs], "nan": ["--pairs", pairs],
            "negative": ["--pairs", pairs], "top-k too large": ["--top-k", 301],
            "top-k too large known": ["--top-k", 299, "--exclude-known"], "labels": ["--output", "labels"],
            "logits": [], "node model": ["--top-k", 3], "both": ["--pairs", pairs, "--top-k", 3],
            "queries alone": ["--queries", pairs], "output with pairs": ["--pairs", pairs, "--output", "embeddings"],
            "no pairs file": ["--pairs", tmp_path / "absent.csv"]}[case]
    checkpoint = checkpoints["nodes"] if case == "node model" else link
    status, _, err = predict(capsys, "--checkpoint", checkpoint, "--out", out, *args)
    want = {"out of range": f"{pairs}, line 2: node id 300 is out of range",
            "not an integer": f"{pairs}, line 2: 'x2' is not a node id", "nan": f"{pairs}, line 1: 'NaN'",
            "negative": f"{pairs}, line 1: node id -3 is out of range",
            "top-k too large": "--top-k 301 is more than the candidates: the graph has 300 nodes",
            "top-k too large known": "--top-k 299 is more than the candidates: with --exclude-known",
            "labels": "--output labels: a link model predicts no node labels; it scores node pairs (--pairs FILE)",
            "logits": "--output logits: a link model predicts no node logits",
            "node model": "--top-k: ", "both": "--pairs and --top-k: give one",
            "queries alone": "--queries applies to --top-k",
            "output with pairs": "--output applies to node outputs; --pairs writes the pairs' scores",
            "no pairs file": "--pairs"}[case]
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("gnnmesh: error: ") and want in err, err
    assert not out.exists()
    if case == "node model":
        assert "holds a classification model; scoring node pairs takes a --task link checkpoint" in err
