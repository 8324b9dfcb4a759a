"""Performance models of the strategies, and the machine rates they take (given or probed).

``estimate.Estimate`` is the one result a strategy's model gives (epoch time and its terms,
bytes per rank and phase, peak memory per rank), so that strategies can be ranked side by
side: ``partition.estimate`` (1D partition parallelism, for a given partition) and
``tensor.estimate`` (feature-column tensor parallelism, plain or decoupled), both built on
``trace`` (what a model asks of one epoch) and on ``machine``, the machine model (compute
rates, links, collective costs), as is ``grid3d``, the 3D model (``grid3d.predict``). Each strategy's model
gives its candidates through one protocol (``job.PlanJob``, named by ``StrategySpec.planner``),
and ``rank.rank_strategies`` puts every registered full-graph strategy's candidates for a graph
on P ranks side by side.
"""
