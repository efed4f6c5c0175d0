"""``gradwatch serve``: the API (and dashboard) in one process; token management too.

``--create-token P --scope S`` prints a new token once; ``--list-tokens [--project P]``
lists ids, projects, scopes and dates (never secrets); ``--revoke-token ID|TOKEN`` revokes
one: the server refuses it (401) from the next request on. ``--convert-pages`` rewrites a
SQLite database of an earlier gradwatch with 32 KiB pages (``server.db.convert_pages``).
"""

from __future__ import annotations

import argparse
import sys
import time

from gradwatch.commands import Subparsers, data_dir_help


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted, or create a token and exit."""
    try:
        from gradwatch_server.cli_actions import (
            ServerError,
            Settings,
            check_database,
            convert_pages,
            new_token,
            revoke,
            serve,
            tokens,
        )
    except ImportError as e:
        print(
            f"gradwatch serve: the server is not installed ({e}); pip install 'gradwatch[server]'",
            file=sys.stderr,
        )
        return 2
    try:
        settings = Settings.from_env(
            db=args.db,
            data_dir=args.data_dir,
            host=args.host,
            port=args.port,
            stalled_after=args.stalled_after,
            allowed_hosts=tuple(args.allowed_host or ()),
            **({"allow_private_webhooks": True} if args.allow_private_webhooks else {}),
            **({"require_tokens": True} if args.require_tokens else {}),
        )
        if args.create_token or args.list_tokens or args.revoke_token:
            check_database(settings.db_url)  # serving checks it as it starts; convert_pages
            # makes checks of its own
        if args.create_token:
            secret = new_token(settings, args.create_token, args.scope)
            print(f"{args.scope} token for project {args.create_token!r} (shown once):")
            print(secret)
            return 0
        if args.list_tokens:
            _print_tokens(tokens(settings, args.project))
            return 0
        if args.convert_pages:
            pages = convert_pages(settings.db_url)
            if not pages.changed:
                print(f"{pages.path} has {pages.new_page_size // 1024} KiB pages already")
                return 0
            print(
                f"converted {pages.path} from {pages.old_page_size // 1024} KiB to "
                f"{pages.new_page_size // 1024} KiB pages in {pages.seconds:.1f} s "
                f"({pages.bytes_before / 1e6:,.1f} MB before, "
                f"{pages.bytes_after / 1e6:,.1f} MB after)"
            )
            return 0
        if args.revoke_token:
            done = revoke(settings, args.revoke_token)
            print(f"revoked token {done['id']} ({done['scope']}, project {done['project']!r})")
            return 0
        serve(settings)
    except ServerError as e:
        print(f"gradwatch serve: {e}", file=sys.stderr)
        return 2
    return 0


def _print_tokens(rows: list[dict[str, object]]) -> None:
    if not rows:
        print("no tokens (create one with --create-token PROJECT --scope write|read)")
        return
    print(f"{'id':>4}  {'scope':5}  {'created (UTC)':19}  {'revoked (UTC)':19}  project")
    for row in rows:
        print(
            f"{row['id']:>4}  {row['scope']!s:5}  {_when(row['created_at']):19}  "
            f"{_when(row['revoked_at']) or '-':19}  {row['project']}"
        )


def _when(t: object) -> str:
    if not isinstance(t, (int, float)):
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def add_parser(sub: Subparsers) -> None:
    """Register ``gradwatch serve``."""
    p = sub.add_parser(
        "serve",
        help="run the gradwatch server (API + dashboard)",
        description="Serve the API on HOST:PORT. Runs spooled in the data directory are "
        "imported automatically. Binding to a non-loopback address requires API tokens.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument(
        "--db",
        help="database URL, e.g. postgresql://user@host/gradwatch (default: $GRADWATCH_DB, "
        "else SQLite in the data directory)",
    )
    p.add_argument("--data-dir", help=data_dir_help())
    p.add_argument(
        "--stalled-after",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="a run with no heartbeat for this long is 'stalled' (default 120)",
    )
    p.add_argument(
        "--allow-private-webhooks",
        action="store_true",
        help="let alert webhooks reach loopback, private and link-local addresses "
        "(default: refused; also $GRADWATCH_ALLOW_PRIVATE_WEBHOOKS=1)",
    )
    p.add_argument(
        "--require-tokens",
        action="store_true",
        help="require an API token on every request, on loopback too (e.g. behind a reverse "
        "proxy on the same host); also $GRADWATCH_REQUIRE_TOKENS=1",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="a host name browsers and collectors use to reach the server (a reverse proxy's "
        "public name, this machine's name); repeatable, also $GRADWATCH_ALLOWED_HOSTS=a,b. "
        "Requests with any other Host header are refused (400: DNS rebinding); loopback "
        "names and addresses are always served",
    )
    p.add_argument(
        "--create-token",
        metavar="PROJECT",
        help="create an API token for PROJECT, print it and exit",
    )
    p.add_argument(
        "--scope",
        choices=("write", "read"),
        default="write",
        help="token scope: write (collectors) or read (dashboards, CLI); default write",
    )
    p.add_argument(
        "--list-tokens",
        action="store_true",
        help="list API tokens (id, scope, dates, project; never the secret) and exit",
    )
    p.add_argument("--project", help="with --list-tokens: only this project's tokens")
    p.add_argument(
        "--revoke-token",
        metavar="ID_OR_TOKEN",
        help="revoke a token (its id from --list-tokens, or the token itself) and exit",
    )
    p.add_argument(
        "--convert-pages",
        action="store_true",
        help="rewrite a SQLite database made by an earlier gradwatch with 32 KiB pages "
        "(more live runs per server; stop the server first; needs free disk for twice the "
        "database) and exit",
    )
    p.set_defaults(func=run)
