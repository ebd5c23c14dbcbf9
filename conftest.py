"""Root pytest configuration: registers the fixture plugins that start real test servers."""

pytest_plugins = [
    "tests.infra.cluster",
    "tests.infra.image",
    "tests.infra.kube",
    "tests.infra.postgres",
    "tests.infra.services",
    "tests.infra.spark_operator",
]
