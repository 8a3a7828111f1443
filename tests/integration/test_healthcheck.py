"""`python -m service.healthcheck` (Docker HEALTHCHECK): readiness by default, liveness on ask."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.serve_process import ROOT, clean_env, served


def _check(port: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.healthcheck", *args], cwd=ROOT,
        env=clean_env({"SEARCH_PORT": port}), capture_output=True, text=True, timeout=60,
        stdin=subprocess.DEVNULL, check=False,
    )


def test_a_ready_server_is_healthy(tmp_path: Path) -> None:
    with served(tmp_path / "data") as address:
        port = address.rsplit(":", 1)[1]
        ready, live = _check(port), _check(port, "--liveness")
    assert (ready.returncode, ready.stdout.strip()) == (0, "SERVING"), ready.stderr
    assert (live.returncode, live.stdout.strip()) == (0, "SERVING"), live.stderr


def test_a_server_whose_model_cannot_load_is_alive_but_not_ready(tmp_path: Path) -> None:
    from service.embeddings.minilm import find_model_dir

    model = tmp_path / "model"  # the real config; weights and tokenizer that cannot load
    model.mkdir()
    shutil.copy(find_model_dir() / "config.json", model / "config.json")
    for name in ("tokenizer.json", "model.safetensors"):
        (model / name).write_text("not a model")
    broken = {"SEARCH_EMBEDDER": "local", "SEARCH_EMBEDDING_MODEL_DIR": str(model)}
    with served(tmp_path / "data", broken) as address:
        port = address.rsplit(":", 1)[1]
        ready, live = _check(port), _check(port, "--liveness")
    assert (ready.returncode, ready.stdout.strip()) == (1, "NOT_SERVING")
    assert live.returncode == 0


def test_nothing_listening_is_unhealthy(tmp_path: Path) -> None:
    done = _check("1")
    assert done.returncode == 1
    assert "unhealthy: UNAVAILABLE" in done.stderr


def _dockerignore_keeps(path: str, rules: list[str]) -> bool:
    """Docker's rule order: the last matching pattern decides ('!' re-includes)."""
    import fnmatch

    kept = True
    for rule in rules:
        negated, pattern = rule.startswith("!"), rule.lstrip("!")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        pattern = pattern.removeprefix("**/")
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern)
               for p in prefixes):
            kept = negated
    return kept


def test_the_docker_context_holds_what_the_image_copies_and_no_secrets() -> None:
    rules = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    copies = [line.split()[1:-1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line]  # sources, not the target
    copied = [source for sources in copies for source in sources]
    assert "service" in copied
    for source in copied:
        assert _dockerignore_keeps(source.rstrip("/"), rules), source
    for secret in (".venv/bin/python", "data/page_token.key", "data/credentials.key",
                   ".git/config", "clients/node/node_modules/x.js", "service/__pycache__/a.pyc"):
        assert not _dockerignore_keeps(secret, rules), secret
    text = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["python", "-m", "service.healthcheck"]' in text  # readiness, not --liveness
