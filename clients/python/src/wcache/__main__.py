"""``python -m wcache`` (console script ``wcache-py``): how this Python reaches a daemon.

``python -m wcache`` (or ``--help``) prints where the client looks for the
daemon of a GPU and which variables change that; ``python -m wcache status
--socket PATH`` (or ``--device-uuid UUID``) asks one daemon for its status.
The daemon itself, and every other command, is the Go binary ``wcache``.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import __version__
from ._errors import WcacheError
from ._paths import ENV_SOCKET_TEMPLATE, Layout

EPILOG = """\
How the client finds a daemon: an explicit socket path wins; else the GPU's
UUID (from torch, or --device-uuid) is put into the socket template
{env} (now: {socket}).
The daemon runs as the Go binary `wcache serve` (or `wcache launch`); an
engine of another user needs the daemon's --socket-group and --allow-uid or
--allow-gid. With no socket the client raises NoDaemonError and the engine
loads from disk. See docs/python-client.md and docs/operations.md."""


def _parser() -> argparse.ArgumentParser:
    try:
        socket = Layout.from_env().socket.text
    except WcacheError as exc:  # a bad template in the environment: say so, still print help
        socket = f"invalid: {exc}"
    p = argparse.ArgumentParser(
        prog="python -m wcache",
        description=f"wcache {__version__}: Python client of the wcache weight daemon.",
        epilog=EPILOG.format(env=ENV_SOCKET_TEMPLATE, socket=socket),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"wcache {__version__}")
    sub = p.add_subparsers(dest="command")
    st = sub.add_parser("status", help="ask a daemon for its status")
    st.add_argument("--socket", help="daemon socket path")
    st.add_argument("--device-uuid", help="GPU UUID put into the socket template")
    st.add_argument("--timeout", type=float, default=10.0, help="seconds (default 10)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if args.command != "status":
        p.print_help()
        return 0
    from ._client import status
    try:
        resp = status(socket=args.socket, device_uuid=args.device_uuid, timeout=args.timeout)
    except WcacheError as exc:
        print(f"wcache: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(resp, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
