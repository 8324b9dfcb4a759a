"""The tensor strategy (NeutronTP): feature columns split across ranks, the topology held by all.

    strategy.py              the engine (TensorParallel)
    chunked_aggregation.py   the aggregation cut into chunks of rows, pipelined with the switches
    layout_switch.py         the all-to-all between the row and the column layouts
    host_store.py            the engine keeping vertex data in host memory (TensorOffload)
    parts.py                 the tensor parts writer
"""
