"""Owns `stratagem mcp`: the harness as an MCP server, over stdio or streamable HTTP on this
machine only (the server is in `stratagem/mcp/`; the MCP SDK is imported only when it runs)."""

from __future__ import annotations

import socket
from typing import Annotated

import typer
from rich.console import Console

from stratagem.cli.common import app, fail
from stratagem.errors import ConfigError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("mcp")
def mcp_cmd(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio.")] = False,
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="The port of --http.")] = 8000,
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="The address of --http: 127.0.0.1, localhost or ::1 (this machine only).")] = "127.0.0.1",
) -> None:
    """Serve stratagem's harness to a coding agent as MCP tools: evaluate, baseline, list_runs,
    show_run, show_design, export_design, start_run, watch_run, stop_run. Over stdio by
    default (the agent starts `stratagem mcp`); --http serves streamable HTTP on localhost.
    Register it with an agent: docs/agents.md."""
    console = Console(stderr=True)
    if http:
        if host not in LOOPBACK:
            fail(console, ConfigError(f"--host {host}: the server is for this machine only; give one of "
                                      f"{', '.join(LOOPBACK)}"), False, 2)
        if not 0 < port < 65536:
            fail(console, ConfigError(f"--port {port}: give a port between 1 and 65535"), False, 2)
        try:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
                s.bind((host, port))
        except OSError as e:
            fail(console, ConfigError(f"--port {port}: cannot listen on {host}:{port} ({e.strerror or e})"), False, 2)
        console.print(f"stratagem mcp: streamable HTTP at http://{host}:{port}/mcp (Ctrl-C stops)", highlight=False)
    from stratagem.mcp.server import serve

    try:
        serve("streamable-http" if http else "stdio", host=host, port=port)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
