"""Passkeys for ``fiduciary serve``, from the environment.

``FIDUCIARY_PASSKEY_RP_ID`` (the relying party id: the console's host name) and
``FIDUCIARY_PASSKEY_ORIGINS`` (comma-separated, e.g. ``https://pay.example.com``) turn them on.
The registry (credentials, signatures, registration challenges) is in the run store's
database, shared by every server on it; ``FIDUCIARY_PASSKEYS`` names a SQLite file of its own
instead (a server alone). An origin that is not https (except on localhost), or one of the two
without the other, is refused before the server starts (``check_passkeys_env``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..exceptions import ConfigurationError

if TYPE_CHECKING:
    from ..passkeys import Passkeys
    from ..stores.base import Store

__all__ = ["check_passkeys_env", "passkeys_from_env"]


def check_passkeys_env(env: Mapping[str, str] | None = None) -> bool:
    """Whether passkeys are configured; ``ConfigurationError`` if wrongly. Opens nothing."""
    env = os.environ if env is None else env
    rp_id = env.get("FIDUCIARY_PASSKEY_RP_ID", "").strip()
    listed = env.get("FIDUCIARY_PASSKEY_ORIGINS", "").strip()
    if not rp_id and not listed:
        return False
    if not rp_id or not listed:
        raise ConfigurationError(
            "passkeys need both FIDUCIARY_PASSKEY_RP_ID and FIDUCIARY_PASSKEY_ORIGINS"
        )
    try:
        from ..passkeys import check_origins
    except ImportError:
        raise ConfigurationError(
            "passkeys need the 'passkeys' extra: pip install 'fiduciary[passkeys]'"
        ) from None
    check_origins(rp_id, [o.strip() for o in listed.split(",") if o.strip()])
    return True


def passkeys_from_env(
    env: Mapping[str, str] | None = None, *, store: Store | None = None
) -> Passkeys | None:
    """The passkeys the environment configures, their registry in ``store``'s database (or
    the ``FIDUCIARY_PASSKEYS`` file; without either, ``.fiduciary/passkeys.sqlite3``)."""
    env = os.environ if env is None else env
    if not check_passkeys_env(env):
        return None
    from ..passkeys import PasskeyRegistry, Passkeys

    rp_id = env["FIDUCIARY_PASSKEY_RP_ID"].strip()
    origins = [o.strip() for o in env["FIDUCIARY_PASSKEY_ORIGINS"].split(",") if o.strip()]
    own = env.get("FIDUCIARY_PASSKEYS")
    if store is not None and not own:
        return Passkeys(PasskeyRegistry.for_store(store), rp_id=rp_id, origins=origins)
    path = Path(own or Path(".fiduciary") / "passkeys.sqlite3")
    path.parent.mkdir(parents=True, exist_ok=True)
    return Passkeys(PasskeyRegistry(path), rp_id=rp_id, origins=origins)
