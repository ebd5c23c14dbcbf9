"""The Secrets a job mounts: which fields name them, which types may be mounted, and the decision
(refused with ``SecretRefused`` naming the field and type, waiting while one is missing)."""

from __future__ import annotations

import pytest
from icebergsync_operator.reconcile import decide
from icebergsync_operator.secret_refs import (
    ALLOWED_TYPES,
    NamedSecret,
    catalog_secret_field,
    check_secrets,
    named_secrets,
)
from kubernetes.client.rest import ApiException

from tests.unit.test_operator_status_update import SETTINGS, app, cond, observe, reasons, running_status, then
from tests.unit.test_render import _sync

REFUSED_TYPES = ("kubernetes.io/service-account-token", "kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg",
                 "bootstrap.kubernetes.io/token", "example.com/anything-else")


def test_every_secret_the_spec_names_is_listed_with_its_field() -> None:
    sync = _sync()
    assert named_secrets(sync) == (NamedSecret("spec.table.catalog.secretRef", "catalog-creds"),
                                   NamedSecret("spec.source.kafka.secretRef", "kafka-creds"))
    files = _sync(source={"files": {"path": "/in", "format": "json", "secretRef": {"name": "s3"}}})
    assert named_secrets(files, "the catalog")[1] == NamedSecret("spec.source.files.secretRef", "s3")
    assert named_secrets(files, "the catalog")[0].field == "the catalog"


@pytest.mark.parametrize(("kind", "held"), [("IcebergCatalog", "spec.secretRef"),
                                            ("ClusterIcebergCatalog", "spec.jobSecretRef")])
def test_a_catalog_resources_secret_is_named_by_the_resource(kind: str, held: str) -> None:
    sync = _sync(table={"name": "db.trips", "catalogRef": {"kind": kind, "name": "lake"}})
    assert catalog_secret_field(sync) == f"spec.table.catalogRef ({kind} 'lake', {held})"
    assert catalog_secret_field(_sync()) == "spec.table.catalog.secretRef"


def test_only_credential_types_may_be_mounted() -> None:
    secrets = tuple(NamedSecret(f"spec.field{i}", f"s{i}") for i in range(len(ALLOWED_TYPES + REFUSED_TYPES)))
    types = dict(zip([s.name for s in secrets], ALLOWED_TYPES + REFUSED_TYPES, strict=True))
    check = check_secrets(types.get, secrets)
    assert check.missing == ()
    assert len(check.problems) == len(REFUSED_TYPES)
    for problem, secret, kind in zip(check.problems, secrets[len(ALLOWED_TYPES):], REFUSED_TYPES, strict=True):
        assert problem.startswith(f"{secret.field}: Secret {secret.name!r} is of type {kind};")


def test_a_missing_secret_is_waited_for_and_a_forbidden_one_refused() -> None:
    def secret_type(name: str) -> str | None:
        if name == "hidden":
            raise ApiException(status=403, reason="Forbidden")
        return None

    check = check_secrets(secret_type, (NamedSecret("spec.source.kafka.secretRef", "later"),
                                        NamedSecret("spec.source.files.secretRef", "hidden")))
    assert check.missing == ("Secret 'later' (spec.source.kafka.secretRef)",)
    assert check.problems == ("spec.source.files.secretRef: the operator may not read Secret 'hidden' to check its "
                              "type (403 Forbidden); grant it get on Secrets of this namespace (chart value "
                              "rbac.secrets)",)


def test_other_api_errors_propagate_and_each_secret_is_read_once() -> None:
    reads: list[str] = []

    def secret_type(name: str) -> str | None:
        reads.append(name)
        return "kubernetes.io/service-account-token"

    check = check_secrets(secret_type, (NamedSecret("a", "token"), NamedSecret("b", "token")))
    assert reads == ["token"] and [p.split(":")[0] for p in check.problems] == ["a", "b"]

    def failing(name: str) -> str | None:
        raise ApiException(status=500, reason="Internal Server Error")

    with pytest.raises(ApiException):
        check_secrets(failing, (NamedSecret("a", "x"),))


def test_a_refused_secret_is_stalled_never_launched_and_the_running_app_is_kept() -> None:
    problems = ("spec.source.kafka.secretRef: Secret 'token' is of type kubernetes.io/service-account-token; ...",)
    observation = observe(previous=running_status(), applications=(app(1),), generation=2, secret_problems=problems)
    decision = decide(observation, SETTINGS)
    assert decision.launch is None and decision.delete == ()
    assert cond(decision, "Stalled") == ("True", "SecretRefused") and cond(decision, "Ready") == ("False", "SecretRefused")
    assert reasons(decision) == ["SecretRefused"] and "spec.source.kafka.secretRef" in decision.events[0].message
    assert decide(then(decision, observation), SETTINGS).events == ()
    allowed = decide(then(decision, observation, generation=3, secret_problems=()), SETTINGS)
    assert allowed.launch is not None and allowed.launch.reason == "Upgraded"


def test_nothing_is_launched_while_a_named_secret_is_missing() -> None:
    observation = observe(missing_secrets=("Secret 'later' (spec.source.files.secretRef)",))
    waiting = decide(observation, SETTINGS)
    assert waiting.launch is None and waiting.status.phase == "Pending"
    assert cond(waiting, "Reconciling") == ("True", "WaitingForSecret")
    assert reasons(waiting) == ["WaitingForSecret"] and "Secret 'later'" in waiting.events[0].message
    assert decide(then(waiting, observation), SETTINGS).events == ()
    launched = decide(then(waiting, observation, missing_secrets=()), SETTINGS)
    assert launched.launch is not None and launched.launch.version == 1
