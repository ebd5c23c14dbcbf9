"""Kubernetes test fixtures (kube-apiserver + etcd, helm). Filled in by the infra work."""
