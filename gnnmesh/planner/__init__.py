"""Performance models of the strategies, and the machine rates they take (given or probed)."""
