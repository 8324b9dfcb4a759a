"""The grid3d strategy (Plexus): ranks on a 3D grid, every layer one 2D block of the double
permuted adjacency times blocks of the features and weights.

    strategy.py      the engine (Grid3D, GridView): per-layer block products and their reductions
    collectives.py   the grid's autograd collectives (aggregate, partial sums, scatters) and
                     the route of the last layer's output to the ranks that score it
    blocks.py        which block of every matrix a rank holds (GridBlocks)
    permutation.py   the double permutation and its balance measures
    block_files.py   the 2D block files a rank reads its blocks from
    parts.py         the grid3d parts writer
"""
