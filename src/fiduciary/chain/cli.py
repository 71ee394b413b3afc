"""``fiduciary chain``: ``new-key`` (an encrypted v3 keystore) and ``deploy`` (the stablecoin
and the vault on a dev chain, their addresses written to a configuration file). web3 is
imported only when a command runs."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated

import typer

from ..cli._common import CliError, _command
from ..exceptions import ConfigurationError

__all__ = ["register"]

chain_app = typer.Typer(
    help="The live backend on an EVM node: keystores and dev-chain deployments.",
    no_args_is_help=True,
)

PassphraseFile = Annotated[
    Path | None,
    typer.Option(
        "--passphrase-file",
        help="A file holding the keystore passphrase (default: FIDUCIARY_KEYSTORE_PASSPHRASE).",
    ),
]


def _require_extra() -> None:
    try:
        import web3  # noqa: F401
    except ImportError:
        raise CliError(
            "this command needs the chain extra: pip install 'fiduciary[chain]'"
        ) from None


@_command(chain_app, "new-key")
async def new_key(
    out: Annotated[Path, typer.Option("--out", help="Where to write the keystore (JSON).")],
    passphrase_file: PassphraseFile = None,
) -> int:
    """Create a new account and write its key encrypted (v3 keystore); print its address."""
    _require_extra()
    import os
    import secrets

    from .keys import write_keystore

    if out.exists():
        raise CliError(f"{out} exists already: not overwriting a keystore")
    if passphrase_file is not None:
        try:
            passphrase = passphrase_file.read_text(encoding="utf-8").rstrip("\r\n")
        except OSError:
            raise CliError(f"cannot read the passphrase file {passphrase_file}") from None
    else:
        passphrase = os.environ.get("FIDUCIARY_KEYSTORE_PASSPHRASE", "")
    if not passphrase:
        raise CliError("no passphrase: set FIDUCIARY_KEYSTORE_PASSPHRASE or --passphrase-file")
    address = write_keystore(out, secrets.token_bytes(32), passphrase)
    typer.echo(address)
    return 0


@_command(chain_app, "deploy")
async def deploy_command(
    rpc: Annotated[str, typer.Option("--rpc", help="The node's JSON-RPC URL.")],
    keystore: Annotated[Path, typer.Option("--keystore", help="The deployer's v3 keystore.")],
    out: Annotated[Path, typer.Option("--out", help="The configuration file to write.")] = Path(
        "chain.json"
    ),
    passphrase_file: PassphraseFile = None,
    mint: Annotated[str, typer.Option(help="USDC minted to the deployer.")] = "1000000",
    confirmations: Annotated[int, typer.Option(min=1, help="Blocks a receipt needs.")] = 1,
) -> int:
    """Deploy the USD stablecoin (OpenZeppelin ERC20, 6 decimals) and an ERC-4626 vault on a
    dev chain and write their addresses to --out."""
    _require_extra()
    from .config import save_config
    from .deploy import deploy
    from .keys import load_keystore

    try:
        amount = Decimal(mint)
    except InvalidOperation:
        raise CliError(f"--mint: {mint!r} is not a number") from None
    try:
        signer = load_keystore(keystore, passphrase_file=passphrase_file)
        config = await deploy(rpc, signer, mint=amount, confirmations=confirmations)
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    save_config(config, out)
    typer.echo(f"chain {config.chain_id}: USDC {config.token}, vault {config.vault}")
    typer.echo(f"written to {out}")
    return 0


def register(app: typer.Typer) -> None:
    """Add the ``chain`` group to the main command."""
    app.add_typer(chain_app, name="chain")
