"""The job's Prometheus metrics, served by the driver (spec.metrics): :class:`JobMetrics` holds them, the driver
loop (spark_app/job/loop.py) reports to it, :func:`serve` exposes them. Names and meanings: icebergsync.metrics.names."""

from spark_app.job.metrics.job_metrics import JobMetrics, serve

__all__ = ["JobMetrics", "serve"]
