"""The async client: stream pages, follow page tokens, read the workspace guidance.

    python async_search.py [ADDRESS] [QUERY]
"""

from __future__ import annotations

import asyncio
import sys

from search_client import AsyncSearchClient, SearchError, SearchMode


async def main(target: str, text: str) -> None:
    """Search every project of the caller, then list workspace accounts."""
    async with AsyncSearchClient(target, default_timeout=30) as client:
        ids = [p.project_id async for p in client.iter_projects()]
        print(f"{len(ids)} projects")
        if ids:
            # One call streams up to three pages; each page carries its own resume token.
            async for page in client.search_projects(
                ids, text, mode=SearchMode.HYBRID, page_size=3, max_pages=3,
                request_id="async-example",
            ):
                titles = ", ".join(r.title for r in page.results)
                print(f"page {page.page_number}: {titles or '(empty)'}")
        try:
            accounts = await client.list_accounts()
        except SearchError as error:  # e.g. UNIMPLEMENTED on a server without workspace search
            print(f"workspace: {error}")
            return
        print(f"{len(accounts.accounts)} accounts; guidance:\n{accounts.guidance.text[:400]}")


if __name__ == "__main__":
    asyncio.run(main(
        sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:50051",
        sys.argv[2] if len(sys.argv) > 2 else "nebula",
    ))
