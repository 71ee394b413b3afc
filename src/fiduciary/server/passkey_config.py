"""Passkeys for ``fiduciary serve``, from the environment.

``FIDUCIARY_PASSKEY_RP_ID`` (the relying party id: the console's host name) and
``FIDUCIARY_PASSKEY_ORIGINS`` (comma-separated, e.g. ``https://pay.example.com``) turn them on;
the registry is ``FIDUCIARY_PASSKEYS`` (default ``.fiduciary/passkeys.sqlite3``). An origin that
is not https (except on localhost), or one of the two without the other, is refused before
the server starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..exceptions import ConfigurationError

if TYPE_CHECKING:
    from ..passkeys import Passkeys

__all__ = ["passkeys_from_env"]


def passkeys_from_env(env: Mapping[str, str] | None = None) -> Passkeys | None:
    env = os.environ if env is None else env
    rp_id = env.get("FIDUCIARY_PASSKEY_RP_ID", "").strip()
    listed = env.get("FIDUCIARY_PASSKEY_ORIGINS", "").strip()
    if not rp_id and not listed:
        return None
    if not rp_id or not listed:
        raise ConfigurationError(
            "passkeys need both FIDUCIARY_PASSKEY_RP_ID and FIDUCIARY_PASSKEY_ORIGINS"
        )
    try:
        from ..passkeys import PasskeyRegistry, Passkeys, check_origins
    except ImportError:
        raise ConfigurationError(
            "passkeys need the 'passkeys' extra: pip install 'fiduciary[passkeys]'"
        ) from None
    origins = [o.strip() for o in listed.split(",") if o.strip()]
    check_origins(rp_id, origins)  # before anything is opened
    path = Path(env.get("FIDUCIARY_PASSKEYS") or Path(".fiduciary") / "passkeys.sqlite3")
    path.parent.mkdir(parents=True, exist_ok=True)
    return Passkeys(PasskeyRegistry(path), rp_id=rp_id, origins=origins)
