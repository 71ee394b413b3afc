"""The chain's guards: what must be refused before a person is even asked. ``RecipientGuard``
(safety, pre) blocks a ``send_transfer`` to an address that is malformed, fails its EIP-55
checksum, is the zero address or is the token's own contract; the wallet checks the same again
before signing (a guard list can be configured away, the signing path cannot). ``chain_guards``
adds the post-execution guards of ``post_guards``."""

from __future__ import annotations

from ..guards import Guard, GuardCall, GuardTier, Phase, Verdict
from .addresses import checked_recipient
from .config import ChainConfig
from .errors import ChainError
from .post_guards import chain_post_guards

__all__ = ["RecipientGuard", "chain_guards"]


class RecipientGuard:
    name = "chain_recipient"
    tier: GuardTier = "safety"
    phase: Phase = "pre"

    def __init__(self, config: ChainConfig) -> None:
        self.config = config

    def check(self, call: GuardCall) -> Verdict:
        if call.capability.name != "send_transfer":
            return Verdict.ok()
        try:
            checked_recipient(
                str(call.args.get("to", "")),
                token=self.config.token,
                token_symbol=self.config.token_symbol,
            )
        except ChainError as exc:
            return Verdict.block(
                f"Refused: {exc.message}.",
                for_person=f"This transfer was refused before signing: {exc.message}.",
            )
        return Verdict.ok()


def chain_guards(config: ChainConfig) -> list[Guard]:
    """The guards to give an agent along with ``chain_capabilities``: the recipient's check
    before, and the post-execution guards (``post_guards``) after a write's receipt."""
    return [RecipientGuard(config), *chain_post_guards(config)]
