"""The lines every reader of a file of ids reads: comments cut, blanks skipped, numbers kept;
a file that is not text is one line naming it, as each reader (``--nodes``, ``--pairs``) says."""

import pytest

from gnnmesh.errors import ConfigError
from gnnmesh.predict.lines import data_lines
from gnnmesh.predict.nodes import read_node_file
from gnnmesh.predict.pairs import read_pairs_file


def test_data_lines_skip_comments_and_blanks_and_keep_line_numbers(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("# ids\n\n 3 \n4  # four\n   # nothing\n5,6\n")
    assert list(data_lines(path, "ids")) == [(3, "3"), (4, "4"), (6, "5,6")]


@pytest.mark.parametrize("read,what", [(read_node_file, "not a text file of node ids (nor a .npy array)"),
                                       (read_pairs_file, "not a text file of node pairs")])
def test_a_binary_file_is_refused_by_each_reader_as_its_own(tmp_path, read, what):
    path = tmp_path / "ids.bin"
    path.write_bytes(b"1\n\xff\xfe\x00\n")
    with pytest.raises(ConfigError) as err:
        read(path, 10)
    assert str(err.value) == f"{path}: {what}"


def test_both_readers_read_the_same_lines(tmp_path):
    (tmp_path / "n.txt").write_text("# nodes\n7\n\n2  # two\n")
    (tmp_path / "p.txt").write_text("# pairs\nsource destination\n7 2\n\n2,7  # back\n")
    assert read_node_file(tmp_path / "n.txt", 10).tolist() == [2, 7]
    assert read_pairs_file(tmp_path / "p.txt", 10).tolist() == [[7, 2], [2, 7]]
