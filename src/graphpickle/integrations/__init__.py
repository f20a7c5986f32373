"""graphpickle in real engines: dask.distributed, dask's tokenize, process pools.

Each module here is public under a shorter path (``graphpickle.dask_distributed``,
``graphpickle.dask_tokenize``, ``graphpickle.futures``); the engines themselves
are imported only when a function that needs them is called.
"""
