"""The admin's policy on what a tenant may ask the Spark pods for (pure).

``spec.spark.image``, ``spec.spark.serviceAccount`` and ``spec.spark.conf`` go into the
SparkApplication, and the operator itself connects to ``spec.table.catalog.uri`` (parsed by
``endpoints``: an ambiguous URI is refused even when every endpoint is allowed);
``policy_problems`` lists each one the operator's settings do not allow, so a refused spec is
never rendered nor its catalog contacted. Conf keys are matched with shell-style patterns (``fnmatch``).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from icebergsync.spec import IcebergSync
from icebergsync_operator.catalog_access import endpoint_problem
from icebergsync_operator.settings import OperatorSettings


def _matches(key: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(key, pattern) for pattern in patterns)


def policy_problems(sync: IcebergSync, settings: OperatorSettings) -> tuple[str, ...]:
    """Every field of the spec the operator's policy refuses, with why; empty when allowed."""
    spark = sync.spec.spark
    problems = []
    if spark.image and settings.allowed_images and not spark.image.startswith(settings.allowed_images):
        problems.append(f"spec.spark.image: {spark.image!r} is not allowed (allowed image prefixes: "
                        f"{', '.join(settings.allowed_images)})")
    account = spark.service_account
    if account and settings.allowed_service_accounts and account not in settings.allowed_service_accounts:
        problems.append(f"spec.spark.serviceAccount: {account!r} is not allowed (allowed: "
                        f"{', '.join(settings.allowed_service_accounts)})")
    for key in sorted(spark.conf):
        if _matches(key, settings.denied_spark_conf):
            problems.append(f"spec.spark.conf: {key!r} is denied by the operator's policy")
        elif settings.allowed_spark_conf and not _matches(key, settings.allowed_spark_conf):
            problems.append(f"spec.spark.conf: {key!r} is not among the allowed keys "
                            f"({', '.join(settings.allowed_spark_conf)})")
    endpoint = endpoint_problem(sync.spec.table.catalog_or_default, settings.allowed_catalog_uris)
    if endpoint:
        problems.append(f"spec.table.catalog.uri: {endpoint}")
    return tuple(problems)
