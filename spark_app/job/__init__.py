"""The driver: the job loop and what runs it.

:mod:`.loop` (``SyncJob``: start-up, triggers, recovery), :mod:`.lane` (everything a sync does to one table),
:mod:`.trigger` (one trigger of a sync of several tables as one cut: docs/protocol.md, "Many tables in one
sync"), :mod:`.session` (the Spark session) and :mod:`.metrics` (the job's Prometheus metrics).
"""
