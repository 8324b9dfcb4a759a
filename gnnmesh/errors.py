"""Errors gnnmesh raises for bad input. All are ValueErrors so callers can catch any."""


class GraphError(ValueError):
    """A graph, dataset file or vertex-data field is malformed. The message names the file/line or field."""


class ConfigError(ValueError):
    """A configuration value (flag, TOML key) is invalid. The message names the field."""


class TrainingDiverged(ConfigError):
    """The loss or a gradient became NaN or infinite (often: a learning rate too high). The
    message names the epoch; the update that would have spread it was not applied and no
    checkpoint was written for it."""
