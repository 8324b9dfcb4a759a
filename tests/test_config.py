import re

import pytest

from gnnmesh import ConfigError
from gnnmesh.config import FIELDS, Config, strategy_default
from gnnmesh.models import registry as models


def test_defaults_resolve_per_model():
    cfg = Config.of(model="gat").resolved()
    assert (cfg.model.hidden, cfg.training.lr, cfg.model.dropout) == (8, 0.005, 0.6)
    assert Config.of(model="gat", hidden=32).resolved().model.hidden == 32
    for name, model in models.REGISTRY.items():
        resolved = Config.of(model=name).resolved()
        assert all(resolved.get(k) == v for k, v in model.defaults.items())


def test_toml_round_trip(tmp_path):
    cfg = Config.of(model="sage", epochs=7, lr=0.02, metrics="m.jsonl", resume=False).resolved()
    path = tmp_path / "run.toml"
    path.write_text(cfg.to_toml())
    assert Config.from_toml(path) == cfg


def test_toml_holds_one_table_per_section(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\nname = "gin"\nhidden = 32\n[training]\nepochs = 3\nlr = 1\n'
                    '[run]\nstrategy = "grid3d"\n[grid3d]\nblocks = 2\n')
    cfg = Config.from_toml(path)
    assert (cfg.model.name, cfg.model.hidden, cfg.training.lr, cfg.grid3d.blocks) == ("gin", 32, 1.0, 2)
    assert "\nblocks = 2\n" in cfg.to_toml() and "[training]\nepochs = 3" in cfg.to_toml()


def test_flat_toml_still_loads_with_a_one_line_note(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\nmodel = "gin"\nhidden = 32\n[train]\nepochs = 3\nlr = 1\n')
    with pytest.warns(FutureWarning, match="flat config form is deprecated") as caught:
        cfg = Config.from_toml(path)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert (cfg.model.name, cfg.model.hidden, cfg.training.epochs, cfg.training.lr) == ("gin", 32, 3, 1.0)


@pytest.mark.filterwarnings("ignore:.*flat config form")
@pytest.mark.parametrize("text, message", [
    ("[training]\nepochs = 'ten'\n", "field 'epochs': expected int"),
    ("[model]\nmodle = 'gcn'\n", "unknown config field"),
    ("epochs = 'ten'\n", "field 'epochs': expected int"),
    ("modle = 'gcn'\n", "unknown config field"),
    ("model = 'gcnn'\n", "not one of"),
    ("dropout = 1.5\n", "field 'dropout'"),
    ("epochs = 0\n", "field 'epochs': must be >= 1"),
    ("[train]\nepochs = 1\n[run]\nepochs = 2\n", "set twice"),
    ("[gridd]\nblocks = 2\n", r"unknown config section \[gridd\]"),
    ("[grid3d]\nblok = 2\n", r"unknown config field 'blok' in \[grid3d\]"),
    ("epochs = \n", "run.toml"),
    ("resume = true\n", "needs 'checkpoint'"),
])
def test_bad_toml_names_file_and_field(tmp_path, text, message):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        Config.from_toml(path)
    assert "run.toml" in str(err.value)


def test_missing_toml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        Config.from_toml(tmp_path / "nope.toml")


def test_updated_rejects_unknown_and_bad_values():
    with pytest.raises(ConfigError, match="unknown"):
        Config().updated(epoch=3)
    with pytest.raises(ConfigError, match="'lr'"):
        Config().updated(lr=-1.0)
    with pytest.raises(ConfigError, match="expected int"):
        Config().updated(epochs=True)


# -- settings of one strategy -----------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"chunk_size": 4}, "'chunk_size' (--chunk-size) applies only to --strategy tensor; this run uses single"),
    ({"strategy": "partition", "pipeline": False}, "'pipeline' (--no-pipeline) applies only to --strategy tensor"),
    ({"strategy": "grid3d", "pipeline": True}, "'pipeline' (--pipeline) applies only to --strategy tensor"),
    ({"strategy": "tensor", "blocks": 2}, "'blocks' (--blocks) applies only to --strategy grid3d"),
    ({"strategy": "partition", "permute": False}, "'permute' (--no-permute) applies only to --strategy grid3d"),
    ({"strategy": "partition", "grid": "2,1,1"}, "'grid' (--grid) applies only to --strategy grid3d"),
    ({"strategy": "tensor", "partitioner": "rp"}, "'partitioner' (--partitioner) applies only to --strategy partition"),
    ({"strategy": "grid3d", "epsilon": 0.1}, "'epsilon' (--epsilon) applies only to --strategy partition"),
    ({"partition_file": "p.npy"}, "'partition_file' (--partition-file) applies only to --strategy partition"),
    ({"strategy": "partition", "partition_file": "p.npy", "epsilon": 0.1}, "'epsilon' (--epsilon) does not apply with --partition-file"),
    ({"parts": "p", "partitioner": "rp"}, "'partitioner' (--partitioner) does not apply to --parts"),
    ({"parts": "p", "strategy": "grid3d", "permute": True}, "'permute' (--permute) does not apply to --parts"),
    ({"parts": "p", "strategy": "partition", "chunk_size": 4}, "'chunk_size' (--chunk-size) applies only to --strategy tensor"),
])
def test_a_setting_that_does_not_apply_is_refused(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.of(**fields)


def test_settings_that_apply_are_kept_and_unset_ones_resolve_for_their_strategy():
    assert Config.of(strategy="tensor", chunk_size=4, pipeline=False).resolved().tensor.pipeline is False
    defaults = {"partition": {"partitioner": "hp", "epsilon": 0.01},
                "tensor": {"pipeline": True}, "grid3d": {"permute": True, "blocks": 1}, "single": {}}
    for strategy, filled in defaults.items():
        cfg = Config.of(strategy=strategy).resolved()
        assert {k: cfg.get(k) for k in FIELDS if strategy_default(k) is not None and cfg.get(k) is not None} == filled
        assert cfg.updated() == cfg  # a resolved config is a valid one
    stored = Config.of(strategy="partition", partition_file="p.npy").resolved()
    assert (stored.partition.partitioner, stored.partition.epsilon) == (None, None)  # the stored partition decides


def test_under_parts_the_strategy_is_checked_once_the_parts_give_it():
    cfg = Config.of(parts="p", chunk_size=4)  # the strategy is not known yet
    assert cfg.updated(strategy="tensor").resolved().tensor.chunk_size == 4
    with pytest.raises(ConfigError, match=r"'chunk_size' \(--chunk-size\) applies only to --strategy tensor; "
                                          r"this run uses partition"):
        cfg.updated(strategy="partition")
    assert Config.of(parts="p", strategy="grid3d", blocks=2).resolved().grid3d.permute is None  # the parts' own


def test_checking_never_changes_a_config():
    cfg = Config.of(strategy="tensor", chunks=None, fanouts=None)
    before = cfg.to_dict()
    cfg.updated()
    assert cfg.to_dict() == before and not hasattr(cfg, "_resolved")
    with pytest.raises(AttributeError):
        cfg.run.strategy = "partition"  # sections are frozen: a change is a new, checked config


def test_every_flag_names_one_setting_of_one_section():
    from gnnmesh.settings import SECTIONS, field_index
    assert len(field_index()) == sum(len(__import__("dataclasses").fields(c)) for c in SECTIONS.values())
    assert FIELDS["model"] == ("model", "name") and FIELDS["blocks"] == ("grid3d", "blocks")


# -- model options ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"heads": 8}, "'heads' (--heads) does not apply to model gcn, which takes --hidden, --dropout"),
    ({"attn_dropout": 0.6}, "'attn_dropout' (--attn-dropout) does not apply to model gcn"),
    ({"k": 10}, "'k' (--k) does not apply to model gcn"),
    ({"alpha": 0.1}, "'alpha' (--alpha) does not apply to model gcn"),
    ({"model": "sage", "heads": 2}, "'heads' (--heads) does not apply to model sage"),
    ({"model": "gat", "k": 3}, "'k' (--k) does not apply to model gat, which takes --hidden, --dropout, --heads, "
                               "--attn-dropout"),
    ({"decoupled": True, "heads": 8}, "'heads' (--heads) does not apply to the decoupled gcn, which takes --hidden, "
                                      "--dropout, --k, --alpha"),
    ({"model": "gin", "alpha": 0.5}, "'alpha' (--alpha) does not apply to model gin"),
])
def test_a_model_option_the_model_does_not_take_is_refused_whatever_its_value(fields, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        Config.of(**fields)


def test_the_options_a_model_takes_are_its_classs_and_resolve_to_its_defaults():
    from gnnmesh.models import options_of
    from gnnmesh.settings import MODEL_OPTIONS
    forms = [(name, False) for name in models.names()] + [(name, True) for name in models.names(decoupled=True)]
    for name, decoupled in forms:
        # relations and edge_dim have no default: the trainer fills them from the graph
        taken = {o for o in options_of(name, decoupled) if o in MODEL_OPTIONS and o not in ("relations", "edge_dim")}
        resolved = Config.of(model=name, decoupled=decoupled).resolved()
        assert {o for o in MODEL_OPTIONS if resolved.get(o) is not None} == taken, (name, decoupled)
        Config.of(model=name, decoupled=decoupled, **{o: resolved.get(o) for o in taken})  # each given: accepted
    gat = Config.of(model="gat", decoupled=True).resolved()
    assert (gat.model.heads, gat.model.attn_dropout, gat.model.k, gat.model.alpha) == (8, 0.6, 10, 0.1)


def test_a_setting_is_given_whatever_its_value_and_defaults_filled_in_are_not(tmp_path):
    assert "dataset" not in Config().given and "dataset" not in Config.of(epochs=3).resolved().given
    assert "dataset" in Config.of(dataset="cora").given and "dataset" in Config.of(dataset="cora").resolved().given
    path = tmp_path / "run.toml"
    path.write_text('[data]\ndataset = "cora"\n')
    assert "dataset" in Config.from_toml(path).updated(epochs=2).given


def test_the_former_name_of_strategy_spec_still_answers_with_a_warning():
    config = Config.of(strategy="tensor", nproc=2)
    with pytest.warns(DeprecationWarning, match="Config.engine is now named Config.strategy_spec"):
        assert config.engine is config.strategy_spec
