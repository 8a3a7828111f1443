"""Run `python -m service serve --port 0` as a real process and learn its address."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"listening on (\S+)")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment minus SEARCH_* keys (the server rejects unknown ones), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.update(extra or {})
    return env


@contextmanager
def served(
    data_dir: Path, env: Mapping[str, str] | None = None, startup_timeout: float = 60.0
) -> Iterator[str]:
    """A server process on 127.0.0.1:<free port>; yields `host:port`, SIGTERM on exit."""
    with served_process(data_dir, env, startup_timeout) as (address, _pid):
        yield address


@contextmanager
def served_process(
    data_dir: Path, env: Mapping[str, str] | None = None, startup_timeout: float = 60.0
) -> Iterator[tuple[str, int]]:
    """Like `served`, and the process id too (to watch its memory)."""
    values = {"SEARCH_EMBEDDER": "deterministic", "SEARCH_LOG_LEVEL": "WARNING"}
    values.update(env or {})
    log_path = data_dir / "server.log"
    data_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "service", "serve", "--host", "127.0.0.1", "--port", "0",
             "--data-dir", str(data_dir)],
            cwd=ROOT, env=clean_env(values), stdout=subprocess.PIPE, stderr=log, text=True,
        )
        try:
            yield _address(process, startup_timeout, log_path), process.pid
        finally:
            _stop(process)


def _address(process: subprocess.Popen[str], timeout: float, log_path: Path) -> str:
    found: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            match = _LISTENING.search(line)
            if match:
                found.append(match.group(1))
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if not found:
        process.kill()
        raise RuntimeError(f"server did not start; log:\n{log_path.read_text()[-3000:]}")
    return found[0]


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
    if process.stdout is not None:
        process.stdout.close()
