"""`python -m service postgres` as root runs PostgreSQL as another user, who must reach the
data directory through every directory above it. When one of those is made private after
the start (pytest does so to its temporary root at every session), stopping the server must
still work instead of leaving it running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.localpg import start_server

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(os.geteuid() != 0, reason="only root runs PostgreSQL as another user"),
]


def test_stop_works_after_a_parent_directory_turned_private(tmp_path: Path) -> None:
    parent = tmp_path / "private"
    server = start_server(parent / "pg", checks=())
    try:
        assert server.system_user is not None
        assert server.postmaster_alive()
        parent.chmod(0o700)  # what another tool (or pytest session) does meanwhile
        tmp_path.chmod(0o700)
        server.stop()
        assert not server.postmaster_alive()
    finally:
        server.close()
