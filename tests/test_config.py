import pytest

from gnnmesh import ConfigError
from gnnmesh.config import MODEL_DEFAULTS, Config


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
