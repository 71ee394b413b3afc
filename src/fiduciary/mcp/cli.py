"""``fiduciary mcp``: serve an agent's capabilities to an MCP client over stdio.

```
fiduciary mcp --agent module:factory --principal ID [--db PATH] [--skills DIR] [--console-url URL]
              [--mcp-config FILE ...]
```

``--mcp-config``: external MCP servers whose tools the agent gets first (through its gates, so a
client of this server reaches them only as gated capabilities).

stdout is the protocol: nothing else is written there (errors go to stderr, one line, exit 2).
``register(app)`` adds the command to the ``fiduciary`` command line.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..agent_factory import agent_of, load_factory
from ..capabilities import Principal
from ..cli._common import McpConfig, with_mcp
from ..cli._holding import holding
from ..exceptions import FiduciaryError
from ..observability.environment import trace_from_env

__all__ = ["mcp_command", "register"]

DEFAULT_DB = Path(".fiduciary") / "fiduciary.sqlite3"


def mcp_command(
    agent: Annotated[
        str,
        typer.Option(help="The agent factory whose capabilities are served: module:attribute."),
    ],
    principal: Annotated[
        str, typer.Option(help="Every call acts for this principal (the person at the client).")
    ],
    db: Annotated[
        Path,
        typer.Option("--db", envvar="FIDUCIARY_DB", help="The SQLite file runs are stored in."),
    ] = DEFAULT_DB,
    skills: Annotated[
        Path | None, typer.Option(help="A skills directory: its SKILL.md files become prompts.")
    ] = None,
    console_url: Annotated[
        str, typer.Option(help="Where a person approves pending actions (shown to the client).")
    ] = "http://127.0.0.1:8000/",
    mcp_config: McpConfig = None,
) -> None:
    """Serve the agent's capabilities over MCP (stdio): reads answer; writes pass the gates."""
    try:
        with holding(db, "fiduciary mcp"):  # demo --reset refuses to delete it under the client
            asyncio.run(_serve(agent, principal, db, skills, console_url, mcp_config or []))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (FiduciaryError, OSError, ValueError) as exc:
        Console(stderr=True).print(
            f"[red]error:[/] {escape(' '.join(str(exc).split()))}", soft_wrap=True
        )
        raise typer.Exit(2) from None


async def _serve(
    spec: str,
    principal: str,
    db: Path,
    skills_dir: Path | None,
    console_url: str,
    mcp_files: list[Path],
) -> None:
    from ..context.skills import load_skills
    from ..stores.sqlite import SQLiteStore
    from .bridge import McpGateway
    from .server import serve_stdio

    if not principal.strip():
        raise ValueError("--principal must name someone")
    factory = load_factory(spec)
    skills = load_skills(skills_dir) if skills_dir is not None else []
    db.parent.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(db)
    try:
        agent = trace_from_env(agent_of(factory(store), spec))
        async with with_mcp(agent, [], mcp_files) as (agent, _):
            gateway = McpGateway(agent, console_url=console_url)
            await serve_stdio(gateway, principal=Principal(principal), skills=skills)
    finally:
        await store.close()


def register(app: typer.Typer) -> None:
    """Add ``mcp`` to the ``fiduciary`` command."""
    app.command("mcp")(mcp_command)
