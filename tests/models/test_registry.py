"""The model registry (gnnmesh.models.registry): a model registered with one ModelSpec is a
choice of the settings, with its defaults, its options from its class, and its decoupled form
or its absence; what set GAT apart (its attention) is the spec's data."""

import pytest

from gnnmesh.config import Config
from gnnmesh.errors import ConfigError
from gnnmesh.models import GCN, build_model, registry


@pytest.fixture()
def wide_gcn():
    """A model registered for one test: GCN under another name and defaults, no decoupled form."""
    spec = registry.register(registry.ModelSpec("widegcn", GCN, {"hidden": 48, "dropout": 0.1, "lr": 0.02,
                                                                 "weight_decay": 0.0}))
    yield spec
    registry.REGISTRY.pop(spec.name)


def test_a_registered_model_is_a_choice_with_its_defaults(wide_gcn):
    resolved = Config.of(model="widegcn").resolved()
    assert (resolved.model.hidden, resolved.model.dropout, resolved.training.lr) == (48, 0.1, 0.02)
    assert isinstance(build_model("widegcn", 5, 3, hidden=4), GCN)
    with pytest.raises(ConfigError, match="widegcn has no decoupled form; choose gcn, sage, gat"):
        Config.of(model="widegcn", decoupled=True)
    with pytest.raises(ValueError, match="registered already"):
        registry.register(wide_gcn)


def test_attention_is_the_specs_data():
    assert [name for name in registry.names() if registry.spec(name).attention] == ["gat", "gatv2", "gine", "rgat"]
    assert Config.of(model="gat").model.attention and not Config.of(model="gcn").model.attention
    decoupled = registry.spec("gat").form_defaults(decoupled=True)
    assert (decoupled["heads"], decoupled["k"]) == (8, 10)
    assert "heads" not in registry.spec("sage").form_defaults(decoupled=True)
