"""Keys: an encrypted v3 keystore (the standard JSON, eth-account), its passphrase from the
environment or a file. The private key stays inside a ``Signer``: no attribute, repr or error
shows it; ``secrets()`` hands the key and passphrase to a ``Redactor`` as known secrets, so a
careless backend message cannot carry them into an event, a log or a model request."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from eth_account import Account
from eth_account.signers.local import LocalAccount

from ..exceptions import ConfigurationError

__all__ = ["SignedTx", "Signer", "load_keystore", "write_keystore"]


@dataclass(frozen=True, slots=True)
class SignedTx:
    raw: bytes
    tx_hash: str  # 0x-prefixed


class Signer:
    """One account's signing key, kept private."""

    __slots__ = ("_account", "_secrets", "address")

    def __init__(self, account: LocalAccount, *, passphrase: str | None = None) -> None:
        self._account = account
        self.address: str = account.address
        key = account.key.hex()
        bare = key.removeprefix("0x")
        self._secrets = tuple(s for s in (bare, "0x" + bare, passphrase) if s)

    def sign(self, tx: Mapping[str, Any]) -> SignedTx:
        signed = self._account.sign_transaction(dict(tx))
        return SignedTx(bytes(signed.raw_transaction), "0x" + bytes(signed.hash).hex())

    def sign_typed_data(
        self, domain: Any, types: Mapping[str, Any], primary_type: str, message: Mapping[str, Any]
    ) -> bytes:
        """An EIP-712 signature (65 bytes): x402's ``ClientEvmSigner`` protocol, so an x402 EVM
        client signs with this key without holding it. ``domain``: x402's ``TypedDataDomain``
        or a dict; ``types``: lists of x402 ``TypedDataField`` or of dicts."""
        if not isinstance(domain, Mapping):
            domain = {
                "name": domain.name,
                "version": domain.version,
                "chainId": domain.chain_id,
                "verifyingContract": domain.verifying_contract,
            }
        fields = {
            name: [f if isinstance(f, Mapping) else {"name": f.name, "type": f.type} for f in kind]
            for name, kind in types.items()
            if name != "EIP712Domain"
        }
        signed = self._account.sign_typed_data(
            domain_data=dict(domain), message_types=fields, message_data=dict(message)
        )
        return bytes(signed.signature)

    def secrets(self) -> tuple[str, ...]:
        """What a ``Redactor`` must never let through (``known_secrets``)."""
        return self._secrets

    def __repr__(self) -> str:
        return f"Signer({self.address})"

    __str__ = __repr__


def write_keystore(
    path: str | Path, private_key: bytes, passphrase: str, *, iterations: int | None = None
) -> str:
    """Encrypt a key into a v3 keystore file; its address. ``iterations``: pbkdf2 with that
    count (fast, for tests) instead of the default scrypt."""
    kdf: Literal["pbkdf2"] | None = None if iterations is None else "pbkdf2"
    data = Account.encrypt(private_key, passphrase, kdf=kdf, iterations=iterations)
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return str(Account.from_key(private_key).address)


def load_keystore(
    path: str | Path,
    *,
    passphrase_env: str | None = "FIDUCIARY_KEYSTORE_PASSPHRASE",
    passphrase_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Signer:
    """Decrypt a v3 keystore; the passphrase from ``passphrase_file`` if given, else from the
    environment variable ``passphrase_env``. Errors never contain the passphrase."""
    source = os.environ if env is None else env
    if passphrase_file is not None:
        try:
            passphrase = Path(passphrase_file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError:
            raise ConfigurationError(
                f"cannot read the keystore passphrase file {passphrase_file}"
            ) from None
    elif passphrase_env and source.get(passphrase_env):
        passphrase = source[passphrase_env]
    else:
        raise ConfigurationError(
            f"no keystore passphrase: set {passphrase_env} or give a passphrase file"
        )
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"no keystore at {path}") from None
    except ValueError:
        raise ConfigurationError(f"the keystore at {path} is not JSON") from None
    try:
        key = Account.decrypt(data, passphrase)
    except ValueError:
        raise ConfigurationError(
            f"cannot decrypt the keystore at {path}: wrong passphrase or damaged file"
        ) from None
    except Exception:
        raise ConfigurationError(f"the keystore at {path} is not a v3 keystore") from None
    return Signer(Account.from_key(key), passphrase=passphrase)
