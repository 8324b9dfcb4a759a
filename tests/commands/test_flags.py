"""Flags made from the settings: a repeatable list setting's flag, given once per item, joins its
values with commas, as given once comma-separated."""

import argparse

from gnnmesh.commands.flags import add_config_flags


def parse(*argv):
    parser = argparse.ArgumentParser()
    add_config_flags(parser, sections=("link",))
    return parser.parse_args(list(argv))


def test_a_repeatable_flag_given_twice_joins_its_values():
    assert parse("--link-relation", "cites", "--link-relation", "written_by").link_relation == "cites,written_by"
    assert parse("--link-relation", "cites,topic").link_relation == "cites,topic"
    assert parse().link_relation is None


def test_another_flag_given_twice_keeps_the_last():
    assert parse("--link-split", "valid=0.1,test=0.1", "--link-split", "valid=0.2,test=0.1").link_split == \
        "valid=0.2,test=0.1"
