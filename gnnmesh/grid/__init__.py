"""2D/3D grid layouts of the adjacency matrix (Plexus, SC 2025): permutations that balance
the nonzeros over 2D shards, shard files for parallel loading and the performance model."""
