"""The commands beside ``gnnmesh train``: ``partition`` (cut a graph among ranks, write per-rank
parts), ``plan`` (rank a strategy's layouts by predicted epoch time) and ``report`` (draw runs
and a plan)."""
