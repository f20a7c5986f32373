"""graphpickle in real engines: dask.distributed, dask's tokenize, Ray, process pools,
the standard library's multiprocessing.

One public module per engine, each under this package
(``graphpickle.integrations.dask_distributed``, ``.dask_tokenize``, ``.ray``,
``.futures``, ``.multiprocessing``); those that change an engine share one shape: ``install()``,
``uninstall()``, ``installed()``. The engines themselves are imported only when a
function that needs them is called.
"""
