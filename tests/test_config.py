import re

import pytest

from gnnmesh import ConfigError
from gnnmesh.config import MODEL_DEFAULTS, STRATEGY_DEFAULTS, Config


def test_defaults_resolve_per_model():
    cfg = Config(model="gat").resolved()
    assert (cfg.hidden, cfg.lr, cfg.dropout) == (8, 0.005, 0.6)
    assert Config(model="gat", hidden=32).resolved().hidden == 32
    for name, defaults in MODEL_DEFAULTS.items():
        resolved = Config(model=name).resolved()
        assert all(getattr(resolved, k) == v for k, v in defaults.items())


def test_toml_round_trip(tmp_path):
    cfg = Config(model="sage", epochs=7, lr=0.02, metrics="m.jsonl", resume=False).resolved()
    path = tmp_path / "run.toml"
    path.write_text(cfg.to_toml())
    assert Config.from_toml(path) == cfg


def test_toml_sections_are_flattened(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\nmodel = "gin"\nhidden = 32\n[train]\nepochs = 3\nlr = 1\n')
    cfg = Config.from_toml(path)
    assert (cfg.model, cfg.hidden, cfg.epochs, cfg.lr) == ("gin", 32, 3, 1.0)


@pytest.mark.parametrize("text, message", [
    ("epochs = 'ten'\n", "field 'epochs': expected int"),
    ("modle = 'gcn'\n", "unknown config field"),
    ("model = 'gcnn'\n", "not one of"),
    ("dropout = 1.5\n", "field 'dropout'"),
    ("epochs = 0\n", "field 'epochs': must be >= 1"),
    ("[a]\nepochs = 1\n[b]\nepochs = 2\n", "set twice"),
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
        Config(**fields)


def test_settings_that_apply_are_kept_and_unset_ones_resolve_for_their_strategy():
    assert Config(strategy="tensor", chunk_size=4, pipeline=False).resolved().pipeline is False
    defaults = {"partition": {"partitioner": "hp", "epsilon": 0.01},
                "tensor": {"pipeline": True}, "grid3d": {"permute": True, "blocks": 1}, "single": {}}
    for strategy, filled in defaults.items():
        cfg = Config(strategy=strategy).resolved()
        assert {k: getattr(cfg, k) for k in STRATEGY_DEFAULTS if getattr(cfg, k) is not None} == filled
        assert cfg.updated() == cfg  # a resolved config is a valid one
    stored = Config(strategy="partition", partition_file="p.npy").resolved()
    assert (stored.partitioner, stored.epsilon) == (None, None)  # the stored partition decides


def test_under_parts_the_strategy_is_checked_once_the_parts_give_it():
    cfg = Config(parts="p", chunk_size=4)  # the strategy is not known yet
    assert cfg.updated(strategy="tensor").resolved().chunk_size == 4
    with pytest.raises(ConfigError, match=r"'chunk_size' \(--chunk-size\) applies only to --strategy tensor; "
                                          r"this run uses partition"):
        cfg.updated(strategy="partition")
    assert Config(parts="p", strategy="grid3d", blocks=2).resolved().permute is None  # the parts' own
