"""Errors gnnmesh raises for bad input. Both are ValueErrors so callers can catch either."""


class GraphError(ValueError):
    """A graph, dataset file or vertex-data field is malformed. The message names the file/line or field."""


class ConfigError(ValueError):
    """A configuration value (flag, TOML key) is invalid. The message names the field."""
