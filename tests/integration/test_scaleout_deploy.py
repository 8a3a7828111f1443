"""deploy/: the Kubernetes manifests parse and carry what the scale-out setup relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from service.server import SERVICES
from service.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SHARED = {"SEARCH_DATABASE_URL", "SEARCH_PAGE_TOKEN_KEY", "SEARCH_CREDENTIALS_KEY",
          "SEARCH_AUTH_TOKENS"}


def _documents() -> dict[str, dict[str, Any]]:
    yaml = pytest.importorskip("yaml")
    docs = list(yaml.safe_load_all((DEPLOY / "search.yaml").read_text()))
    return {doc["kind"]: doc for doc in docs if doc}


def test_manifests_have_deployment_headless_service_and_pdb() -> None:
    docs = _documents()
    assert set(docs) == {"Deployment", "Service", "PodDisruptionBudget"}
    assert docs["Service"]["spec"]["clusterIP"] == "None"
    assert docs["Service"]["metadata"]["name"] == "search-headless"
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"] == labels
    assert docs["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    assert docs["PodDisruptionBudget"]["spec"]["minAvailable"] < docs["Deployment"]["spec"][
        "replicas"
    ]


def test_container_probes_resources_and_secret_env() -> None:
    spec = _documents()["Deployment"]["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["livenessProbe"]["grpc"]["service"] == ""
    assert container["readinessProbe"]["grpc"]["service"] in SERVICES
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    env = {item["name"]: item for item in container["env"]}
    for name in SHARED:
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "search-secrets"
    # Every variable is a real setting (the server rejects unknown SEARCH_* keys).
    plain = {name: item["value"] for name, item in env.items() if "value" in item}
    Settings.from_mapping(plain)
    grace = float(plain["SEARCH_GRACE_PERIOD"])
    assert spec["terminationGracePeriodSeconds"] > grace


def test_example_secret_lists_the_shared_keys() -> None:
    yaml = pytest.importorskip("yaml")
    secret = yaml.safe_load((DEPLOY / "secret.example.yaml").read_text())
    assert set(secret["stringData"]) == SHARED
