"""The partitioner registry (gnnmesh.partition.registry): the one place a partitioner and the
default are named, read by the settings and the partition command; the choices that were never
partitioners are refused in one line that names what replaced them."""

import pytest

from gnnmesh import cli
from gnnmesh.config import Config
from gnnmesh.partition import registry

SMALL = "sbm:nodes=120,classes=3,features=6,seed=1"


def test_the_default_is_the_registrys_and_every_choice_is_registered():
    assert Config.of(strategy="partition", nproc=2).resolved().partition.partitioner == registry.DEFAULT
    from gnnmesh.settings import PartitionSection
    from dataclasses import fields
    choices = next(f for f in fields(PartitionSection) if f.name == "partitioner").metadata["choices"]
    assert tuple(choices) == registry.names()


@pytest.mark.parametrize("retired, pointer", [
    ("tensor", "--strategy tensor --nparts P --write-parts DIR"), ("permute2", "--strategy grid3d --grid R,C")])
def test_a_retired_partitioner_names_what_replaced_it(retired, pointer, capsys):
    assert cli.main(["partition", "--dataset", SMALL, "--nparts", "2", "--partitioner", retired]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gnnmesh: error: --partitioner {retired}: not a partitioner")
    assert pointer in err


def test_an_unknown_partitioner_lists_the_registered_ones(capsys):
    assert cli.main(["partition", "--dataset", SMALL, "--nparts", "2", "--partitioner", "zz"]) == 2
    assert f"choose from {', '.join(registry.names())}" in capsys.readouterr().err


def test_the_tensor_strategys_parts_are_written_by_its_flag(tmp_path, capsys):
    out = tmp_path / "parts"
    assert cli.main(["partition", "--dataset", SMALL, "--nparts", "2", "--strategy", "tensor",
                     "--write-parts", str(out)]) == 0
    assert (out / "manifest.json").is_file() and "parts:" in capsys.readouterr().out
