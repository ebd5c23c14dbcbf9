"""The IcebergSync operator: kopf handlers that run each IcebergSync as a Spark Operator SparkApplication.

``main`` parses settings and registers handlers; ``handlers`` are thin and call ``lifecycle``, which
observes (``kube``, ``table``), decides (pure ``reconcile`` and ``status``) and acts (``launch``,
``cleanup``). ``render`` builds the SparkApplication and ConfigMap as pure functions.
"""
