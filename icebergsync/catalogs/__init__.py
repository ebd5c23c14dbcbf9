"""Catalog resources: ``IcebergCatalog`` (namespaced) and ``ClusterIcebergCatalog``, declared by admins.

``model`` holds their spec and status models (read by the operator, the source of their CRDs);
``crd`` generates the CRDs and their printer columns and CEL rules.
"""
