"""Catalog resources in the operator: which catalog a sync may use (``resolve``, ``lookup``), the
connection check behind each catalog resource's Ready condition (``check``, ``status``,
``lifecycle``) and their kopf handlers (``handlers``)."""
