"""The workspace memo stays bounded in a real server process (issue 17 item 3), and hostile
provider numbers from all eight adapters never end a call INTERNAL (item 6): the reliability
harness's workspace cases, run small enough for the suite.

60 GitLab queries naming distinct `project` values of 3 MB answers each: the memo keeps at
most MEMO_MAX_ENTRIES of them (unbounded it held every one, ~180 MB, for the process's life).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.reliability.abuse_workspace import MEMO_ANSWER_BYTES, workspace_cases

KEPT = 16  # answers the memo may keep (service.workspace.pool.MEMO_MAX_ENTRIES)


async def test_memo_bound_and_hostile_numbers_through_a_server_process(tmp_path: Path) -> None:
    rows = await workspace_cases(tmp_path, projects=60, answer_bytes=MEMO_ANSWER_BYTES)
    assert [(row.case, row.held) for row in rows if not row.held] == [], [
        (row.case, row.figure) for row in rows]
    memo = rows[0].data
    # Fixed here, not read from the module: a larger bound must fail this test.
    assert memo["rss_growth_mib"] < KEPT * MEMO_ANSWER_BYTES / 2**20 + 64, memo
