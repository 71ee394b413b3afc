"""``fiduciary audit verify RUN``: every signed decision of a run, verified again offline.

It reads only the passkey registry — in the run store's database (``--db``, or
``--postgres DSN``), or a file of its own (``--passkeys PATH``, else ``$FIDUCIARY_PASSKEYS``):
the stored assertion bytes, the binding that was signed and the registered public keys; it
trusts nothing the server decided. For each signature it says
who, which key, what was signed, and valid or not. Exit codes: 0 every signature is valid
(or there is none), 1 one is not, 2 could not start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated
from uuid import UUID

import typer
from rich.console import Console
from rich.markup import escape

from ._common import DEFAULT_DB, CliError, Db, _command, missing_extra

__all__ = ["audit_app"]

audit_app = typer.Typer()


@_command(audit_app, "verify")
async def verify(
    run: Annotated[str, typer.Argument(help="The run's id.")],
    passkeys: Annotated[
        Path | None,
        typer.Option(help="A passkey registry of its own (default $FIDUCIARY_PASSKEYS)."),
    ] = None,
    db: Db = DEFAULT_DB,
    postgres: Annotated[
        str | None,
        typer.Option(help="The PostgreSQL database the runs (and passkeys) are stored in."),
    ] = None,
) -> int:
    """Verify every passkey-signed decision of RUN again, from the stored bytes."""
    try:
        run_id = UUID(run)
    except ValueError:
        raise CliError(f"{run!r} is not a run id", 2) from None
    own = passkeys or os.environ.get("FIDUCIARY_PASSKEYS")
    path = Path(own) if own else db
    if postgres is None and not path.is_file():
        raise CliError(f"no passkey registry at {path}", 2)
    try:
        from ..passkeys import PasskeyRegistry, verify_run
    except ImportError:
        missing_extra("audit verify", "passkeys")
    registry = PasskeyRegistry.postgres(postgres) if postgres else PasskeyRegistry(path)
    try:
        verdicts = verify_run(registry, run_id)
    finally:
        registry.close()
    out = Console(highlight=False, soft_wrap=True)
    if not verdicts:
        out.print(f"no signed decisions in run {run_id}")
        return 0
    for v in verdicts:
        mark = "[green]valid[/]" if v.valid else "[red]INVALID[/]"
        signed = v.signed
        what = (
            f"approval {signed.get('approval_id')}: arguments {signed.get('args_digest')}, "
            f"{signed.get('tier')}, {signed.get('amount')} {signed.get('currency')}, "
            f"expires {signed.get('expires_at')}"
        )
        line = f"{mark} {escape(v.approver)} with {escape(v.key)}: {escape(what)}"
        if not v.valid:
            line += f" [red]({escape(v.reason)})[/]"
        out.print(line)
    bad = sum(not v.valid for v in verdicts)
    out.print(f"{len(verdicts) - bad} of {len(verdicts)} signatures valid")
    return 1 if bad else 0
