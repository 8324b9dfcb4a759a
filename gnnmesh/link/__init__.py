"""Link prediction: which node pairs are edges, learned from the graph's own edges and exact
on any number of ranks (``--task link``).

- ``split``: the edges held out for validation and test, and the graph messages pass over;
- ``sources``: a split read from pair files or an OGB link-prediction directory, and
  ``--disjoint-train``;
- ``counter``: random numbers as a function of a key (seed, epoch, edge, draw), so that
  negatives and splits never depend on the strategy or the rank count;
- ``decoders``: a pair's score from its endpoints' embeddings (dot, mlp, distmult);
- ``typed``: a typed graph's relations as the pairs learnt (``--link-relation``);
- ``rows``: the rows of other ranks' embeddings a rank's pairs read, and their gradients back;
- ``metrics``: ROC-AUC, average precision, MRR and Hits@K;
- ``trainer``: ``LinkTrainer``, the trainer of the task.
"""
