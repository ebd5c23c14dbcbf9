"""Root pytest configuration: registers the fixture plugins that start real test servers, and prepares pyiceberg
as the job's start-up does (tests make and commit format-version 3 tables without a job)."""

from spark_app.iceberg.internals import install_v3_metadata_writer

pytest_plugins = [
    "tests.infra.cluster",
    "tests.infra.image",
    "tests.infra.kube",
    "tests.infra.postgres",
    "tests.infra.services",
    "tests.infra.spark_operator",
]


def pytest_configure() -> None:
    install_v3_metadata_writer()
