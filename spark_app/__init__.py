"""The data plane: the PySpark job that keeps one Iceberg table (or several) in sync with a stream.

Its folders are floors, each importing only the floors below it (tests/unit/test_import_graph.py holds the
order, docs/dataplane.md says what lives where), bottom to top: :mod:`.faults` (crash points),
:mod:`.iceberg`, :mod:`.decoding`, :mod:`.sources`, :mod:`.staging`, :mod:`.commit`, :mod:`.upkeep`,
:mod:`.job`, and the entry points :mod:`.cli`, :mod:`.main` and :mod:`.worker_daemon`.
"""
