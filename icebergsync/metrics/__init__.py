"""What the job's metrics, the operator's status and the `status` command share: the source-lag definitions
(:mod:`icebergsync.metrics.lag`) and the job's metric names (:mod:`icebergsync.metrics.names`)."""
