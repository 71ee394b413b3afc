"""``fiduciary chain``: ``new-key`` (an encrypted v3 keystore), ``deploy`` (the stablecoin
and the vault on a dev chain, their addresses written to a configuration file), ``reconcile``
(the intents against the chain) and ``watch`` (payment links and invoices paid by Transfers).
web3 is imported only when a command runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..cli._common import DEFAULT_DB, CliError, Db, _command
from ..exceptions import ConfigurationError

if TYPE_CHECKING:
    from web3 import AsyncWeb3

    from .config import ChainConfig

__all__ = ["register"]

chain_app = typer.Typer(
    help="The live backend on an EVM node: keystores, dev-chain deployments, reconciliation "
    "and the payment watcher.",
    no_args_is_help=True,
)

PassphraseFile = Annotated[
    Path | None,
    typer.Option(
        "--passphrase-file",
        help="A file holding the keystore passphrase (default: FIDUCIARY_KEYSTORE_PASSPHRASE).",
    ),
]

ConfigFile = Annotated[
    Path, typer.Option("--config", help="The chain configuration (from deploy).")
]


def _require_extra() -> None:
    try:
        import web3  # noqa: F401
    except ImportError:
        raise CliError(
            "this command needs the chain extra: pip install 'fiduciary[chain]'"
        ) from None


def _account_and_config(address: str, config_file: Path, db: Path) -> tuple[str, ChainConfig]:
    """``--address`` checked and the configuration read, the database there; else a clear
    error."""
    from .addresses import checked_recipient
    from .config import load_config
    from .errors import ChainError

    try:
        account = checked_recipient(address)
        config = load_config(config_file)
    except ChainError as exc:
        raise CliError(f"--address: {exc.message}") from None
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    if not db.exists():
        raise CliError(f"no database at {db}")
    return account, config


@asynccontextmanager
async def _node(config: ChainConfig) -> AsyncIterator[AsyncWeb3[Any]]:
    """A connection to the node of ``config``, checked to be on its chain; disconnected on
    leaving, an unreachable node a clear error."""
    from web3 import AsyncHTTPProvider, AsyncWeb3

    w3 = AsyncWeb3(AsyncHTTPProvider(config.rpc_url))
    try:
        if await w3.eth.chain_id != config.chain_id:
            raise CliError(f"the node at {config.rpc_url} is not on chain {config.chain_id}")
        yield w3
    except OSError:
        raise CliError(f"cannot reach the chain node at {config.rpc_url}") from None
    finally:
        await w3.provider.disconnect()


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
    uniswap: Annotated[
        Path | None,
        typer.Option(
            "--uniswap",
            help="A node_modules holding @uniswap/v2-core and v2-periphery: deploy their "
            "published builds too, with a USDC/ETH pool (6,000 USDC against 2 ETH).",
        ),
    ] = None,
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
        if uniswap is not None and not (uniswap / "@uniswap" / "v2-periphery").is_dir():
            raise CliError(f"--uniswap: no @uniswap/v2-periphery in {uniswap} (npm ci)")
        config = await deploy(
            rpc, signer, mint=amount, confirmations=confirmations, uniswap=uniswap
        )
    except ConfigurationError as exc:
        raise CliError(str(exc)) from None
    save_config(config, out)
    typer.echo(f"chain {config.chain_id}: USDC {config.token}, vault {config.vault}")
    if config.router is not None:
        typer.echo(f"Uniswap V2 router {config.router}, WETH {config.weth}")
    typer.echo(f"written to {out}")
    return 0


@_command(chain_app, "reconcile")
async def reconcile_command(
    address: Annotated[str, typer.Option("--address", help="The account to reconcile.")],
    config_file: ConfigFile = Path("chain.json"),
    db: Db = DEFAULT_DB,
) -> int:
    """Compare the account's recorded intents with the chain (receipts and the token's
    Transfer logs) and list every difference; exit 1 if there is any."""
    _require_extra()
    from .intents import SQLiteIntentBook
    from .reconcile import reconcile

    account, config = _account_and_config(address, config_file, db)
    async with _node(config) as w3:
        found = await reconcile(w3, config, SQLiteIntentBook(db), account)
    for difference in found:
        typer.echo(f"{difference.kind}: {difference.tx_hash} ({difference.detail})")
    typer.echo(
        f"{len(found)} difference(s) between the intents of {account} and chain {config.chain_id}"
    )
    return 1 if found else 0


@_command(chain_app, "watch")
async def watch_command(
    address: Annotated[str, typer.Option("--address", help="The wallet whose links are paid.")],
    config_file: ConfigFile = Path("chain.json"),
    db: Db = DEFAULT_DB,
    once: Annotated[bool, typer.Option("--once", help="Read once and exit.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between reads.")] = 2.0,
) -> int:
    """Mark payment links and invoices paid as their token Transfers reach the wallet: read
    the logs from the saved cursor (blocks with the configured confirmations), print each
    Transfer found and what it did (paid, late, again, unmatched)."""
    _require_extra()
    from .addresses import checked_recipient
    from .payments import Incoming, SQLiteReceivables
    from .watch import PaymentWatcher

    account, config = _account_and_config(address, config_file, db)
    book = SQLiteReceivables(
        db,
        chain_id=config.chain_id,
        token=checked_recipient(config.token),
        recipient=account,
        decimals=config.token_decimals,
    )

    def report(found: Incoming) -> None:
        what = {
            "paid": f"paid {found.reference}",
            "late": f"LATE: {found.reference} was cancelled; this payment did not pay it",
            "again": f"AGAIN: {found.reference} was already paid; this is a second payment",
            "unmatched": "UNMATCHED: no open link or invoice asks this exact amount",
        }[found.outcome]
        typer.echo(
            f"{what}: {found.amount} {config.token_symbol} from {found.sender} in "
            f"{found.tx_hash} (block {found.block})",
        )

    async with _node(config) as w3:
        watcher = PaymentWatcher(w3, config, book)
        if once:
            for found in await watcher.poll():
                report(found)
            cursor = book.cursor()
            typer.echo(
                "no link or invoice yet: nothing to watch"
                if cursor is None
                else f"read up to block {cursor - 1}"
            )
        else:
            await watcher.run(interval=interval, report=report)
    return 0


def register(app: typer.Typer) -> None:
    """Add the ``chain`` group to the main command."""
    app.add_typer(chain_app, name="chain")
