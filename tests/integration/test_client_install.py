"""Install the client package into a fresh virtualenv and run its example against a server.

The fresh venv gets the package from a wheel-less `pip install` of a copy of clients/python;
its third-party dependencies (grpcio, protobuf, ...) come from the dev venv through a `.pth`
line, so the test needs no network. Nothing from the repository is on its path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

from tests.support.serve_process import ROOT, clean_env, served

CLIENT = ROOT / "clients" / "python"


def _python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _make_venv(tmp_path: Path) -> Path:
    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(venv_dir)
    site = subprocess.run(
        [_python(venv_dir), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    # Dependencies (and pip/setuptools) from the dev venv, appended after the venv's own
    # site-packages; .pth files of that directory are not processed, so the editable
    # install of the service is not visible.
    Path(site, "dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv_dir


def _env() -> dict[str, str]:
    env = clean_env()
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def test_installed_client_runs_the_example_against_a_real_server(tmp_path: Path) -> None:
    source = tmp_path / "search-client-src"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", "dist"
    ))
    venv_dir = _make_venv(tmp_path)
    python = _python(venv_dir)
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", str(source)],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    probe = subprocess.run(
        [python, "-c", "import search_client, pathlib; "
         "p = pathlib.Path(search_client.__file__).parent; "
         "print(p); print((p / 'py.typed').exists(), "
         "(p / 'pb/search/v1/project_search_pb2.pyi').exists())"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, check=True,
    )
    location, markers = probe.stdout.split("\n")[:2]
    assert Path(location).is_relative_to(venv_dir), location
    assert markers == "True True"

    with served(tmp_path / "data") as address:
        run = subprocess.run(
            [python, str(source / "examples" / "quickstart.py"), address],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert "project quickstart (id 1): 3 created" in out
    assert "FTS results for 'star':" in out
    assert "HYBRID results for 'star':" in out
    assert "Nebulae" in out
    assert "expected error: NOT_FOUND PROJECT_NOT_FOUND {'projectId': '987654321'}" in out
    assert os.fspath(ROOT) not in location


def test_examples_import_only_the_public_surface() -> None:
    for example in sorted((CLIENT / "examples").glob("*.py")):
        text = example.read_text()
        assert "search_client._" not in text, example.name
        assert "search_client.pb" not in text, example.name
        assert "from search_client import" in text, example.name
