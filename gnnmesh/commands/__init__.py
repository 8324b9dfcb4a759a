"""The commands beside ``gnnmesh train``: ``partition`` (cut a graph among ranks, write per-rank
parts) and ``plan`` (rank a strategy's layouts by predicted epoch time)."""
