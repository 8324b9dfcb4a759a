"""Out-of-core full-graph training (HongTu, Wang et al., SIGMOD 2024): ``--strategy offload``,
and the machinery tensor parallelism uses with ``--host-store``.

Every layer's vertex data and gradients live in a host tier (``host_store``: RAM, or files);
the fast tier (the GPU, or on CPU the process's working memory) holds one chunk of one stage
at a time, within ``--device-memory``. The vocabulary, one name per thing:

* a **chunk** is a run of one rank's destination rows, with the neighbour rows they read
  (``chunk``: ``Chunk``, and ``ChunkView``, what a model sees of it; ``cut`` and
  ``reorganize``: cutting and ordering them);
* a **batch** is the chunks at one position on every rank, which run together;
* a **stage** is one piece of the model, run over every batch before the next
  (``pipeline``: ``Stage``, ``stages_of``);
* the **plan** says which chunks, in what order, and the **transfer steps** that load their
  rows, keeping rows consecutive batches share (``plan``: ``Plan``, ``build_plan``, which
  picks the chunks for the budget; ``transfers``: the steps, and ``Overlap``, which runs them
  beside compute);
* the **pipeline** runs a plan: stage by stage, batch by batch, forward and back
  (``pipeline``: ``Pipeline``);
* the **host tier** is what a strategy holds of all this: the store, the budget and the plan
  settings, the pipeline and its counters (``host_tier``: ``HostTier``);
* what a plan costs, its traffic and footprint, is predicted from the plan alone
  (``plan``: ``epoch_traffic``, ``footprint``).

``strategy`` is the 1D strategy (``Offload``); ``parallel.tensor.host_store`` the tensor one.
"""

from .host_tier import HostTier, OffloadView
from .pipeline import Pipeline
from .plan import Plan, build_plan
from .strategy import Offload

__all__ = ["HostTier", "Offload", "OffloadView", "Pipeline", "Plan", "build_plan"]
