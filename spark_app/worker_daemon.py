"""PySpark's worker daemon with the data plane imported before it forks workers.

Set as ``spark.python.daemon.module``: every Python worker forked from this daemon starts with
pyarrow, pyiceberg and the data plane already loaded, instead of importing them itself (about a
CPU-second per worker), and a new worker (another core, a replaced worker) is ready at once.
"""

from pyspark import daemon

import spark_app.pipeline  # noqa: F401 - the import is the point: forked workers inherit it

if __name__ == "__main__":
    daemon.manager()
