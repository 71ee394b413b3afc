"""Type-checked, never run: ``ctx.deps`` is typed by ``CallContext[T]``.

``tests/unit/test_deps_typing.py`` runs mypy on this file as it is (clean: each wrong use is
silenced by its ``type: ignore``, and mypy's ``warn_unused_ignores`` fails one that silences
nothing), then with the ignores taken out (each wrong use must be an error, on its line).
"""

from __future__ import annotations

from dataclasses import dataclass

from fiduciary import CallContext, capability


@dataclass
class Db:
    dsn: str

    def fetch(self, key: str) -> int:
        return len(key)


@capability(kind="read")
async def good(key: str, ctx: CallContext[Db]) -> int:
    """A right use: ``ctx.deps`` is a ``Db``."""
    dsn: str = ctx.deps.dsn
    return ctx.deps.fetch(key) + len(dsn)


@capability(kind="read")
async def unknown_attribute(ctx: CallContext[Db]) -> int:
    """A wrong use: a ``Db`` has no ``pool``."""
    ctx.deps.pool.close()  # type: ignore[attr-defined]  # BAD
    return 0


@capability(kind="read")
async def wrong_type(ctx: CallContext[Db]) -> int:
    """A wrong use: ``fetch`` takes a ``str``."""
    return ctx.deps.fetch(42)  # type: ignore[arg-type]  # BAD


@capability(kind="read")
async def no_deps(ctx: CallContext) -> str:
    """A bare ``CallContext`` has no deps: ``ctx.deps`` is None."""
    ctx.deps.dsn.upper()  # type: ignore[attr-defined]  # BAD
    return ""
