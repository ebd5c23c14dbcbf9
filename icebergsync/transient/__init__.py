"""Transient faults: the one retry policy for every call the job makes to the catalog and the object store.

A catalog or an object store that blinks (a reset, a 429 with ``Retry-After``, a 503, SlowDown, a lost
answer) is weather, not a stop. Three layers ride it out, each where the call's safety is known:

* :mod:`.http`: every REST catalog request retries what cannot have been applied (a connection that never
  opened, 429) and what is safe to repeat (reads), honouring ``Retry-After``; a commit's unknown outcome is
  left to the committer, which checks what landed before it tries again;
* :mod:`.object_store`: the job's FileIO uploads a small object in one PUT, retries the object store's
  transient answers in the SDK, takes a completed upload whose answer was lost for the success it was, and
  repeats a read whose error answer the SDK could not read (:mod:`.reads`);
* :mod:`.calls`: the job's own idempotent steps (create-or-load a table, load a table for its FileIO)
  retried on what still escaped, with jittered backoff under a time budget; after it, the documented exit
  status (:data:`~icebergsync.errors.EXIT_CATALOG_UNREACHABLE`, :data:`~icebergsync.errors.EXIT_OBJECT_STORE_UNREACHABLE`).

Every wait is :func:`.http.jittered_backoff`'s; :func:`.http.repeated` is the loop of the repeats bounded by attempts
(a REST answer's broken body, a read the SDK could not read).
"""
