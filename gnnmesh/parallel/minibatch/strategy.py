"""The mini-batch strategy every rank runs: the whole graph's structure on every rank, the
first layer routed by one of APT's routes, the rest data parallel with gradients summed over
ranks. Sampling keyed by node makes the ranks' blocks, together, what one process samples
for the whole batch, so every route's step equals the single process's."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ... import strategies
from ...errors import ConfigError
from ..agreed_partition import agreed_partition
from ..distributed import DistributedStrategy
from ..input_rows import LeafRows
from ..single import whole_graph
from . import dryrun, route_choice
from .contract import BatchSetup, FeatureSupply, MiniBatchStrategy
from .exchange import GRAPH, SHUFFLE
from .feature_homes import FEATURES, job_hosts
from .routes import ROUTES


class MiniBatchParallel(DistributedStrategy, MiniBatchStrategy):
    """``hosts``: the machines the input features are spread over (default: the job's hosts;
    one keeps every row on every rank)."""

    reported_phases = (GRAPH, SHUFFLE)

    def __init__(self, layout, device, route: str = "gdp", method: Optional[str] = None, epsilon: float = 0.01,
                 seed: int = 0, partition_file: Optional[str] = None, hosts: Optional[int] = None):
        super().__init__(layout, device, "rows")
        self.hosts = job_hosts(self.world_size) if hosts is None else hosts
        if self.hosts > 1:  # remote feature reads get a field of their own
            self.reported_phases = (GRAPH, SHUFFLE, FEATURES)
        self.route_class = ROUTES.get(route)  # None for auto: the dry run picks it
        self.name, self.asked = route, route
        self.method, self.epsilon, self.seed, self.partition_file = method, epsilon, seed, partition_file
        self.owner: Optional[np.ndarray] = None
        self.route = None
        self.partition = None
        self.predictions: list = []  # the dry run's, when it chose the route

    def describe(self) -> str:
        where = f", vertices by {self.partition.method}" if self.partition is not None and \
            (self.route is None or self.route.needs_partition) else ""
        chosen = f"{self.asked}: " if strategies.spec(self.asked).planned else ""
        spread = f", features spread over {self.hosts} hosts" if self.hosts > 1 else ""
        return f"{chosen}{self.name} ({self.world_size} ranks{where}{spread})"

    def rank_data(self, graph, x, seed, device):
        return whole_graph(graph, x, seed, device)  # the whole graph on every rank

    def input_rows(self, data):
        if self.hosts > 1:
            raise ConfigError(f"config field 'embed_dim': the input rows are spread over {self.hosts} hosts; learned "
                              "embeddings need every row on every rank (one host)")
        # every rank holds every row; each step's gradient is the ranks' parts summed
        return LeafRows(data, data.row_ids().numpy(), replicated=True)

    def place(self, graph, sampling: dict) -> None:
        """Assign vertices to ranks where the route needs it (snp, dnp, and auto, which may
        pick them), the same on every rank. ``sampling`` (fanouts, batch size, the training
        ids and the sampled operator) is what ``shp`` draws its batches with."""
        if self.route_class is not None and not self.route_class.needs_partition:
            return
        self.partition, owner = agreed_partition(graph, self.world_size, self.rank, self.method, self.epsilon,
                                                 self.seed, self.partition_file, sampling=sampling)
        self.owner = owner.numpy()

    def use(self, route) -> None:
        """Run ``route`` (bound) from now on; ``auto`` takes the chosen route's name."""
        self.route, self.name = route, route.name

    def choose_route(self, setup: BatchSetup) -> FeatureSupply:
        supply = route_choice.choose_route(self, setup)
        self.predictions = supply.predictions
        return supply

    def dry_run_lines(self) -> list:
        return dryrun.table_lines(self.predictions, self.name) if self.predictions else []

    def epoch_counts(self, mine: dict) -> list:
        everyone = self.comm.all_gather_object(mine)
        self.reset_counters()  # gathering the counts is no epoch's traffic
        return everyone

    def first_layer(self, model, view, sample, features):
        return self.route.first_layer(self.comm, model, view, sample, features)
