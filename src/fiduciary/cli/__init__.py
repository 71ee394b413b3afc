"""The ``fiduciary`` command line.

```
fiduciary demo [--yes] [--model NAME] [--reset]
fiduciary chat [--yes] [--model NAME] [--principal WHO]
fiduciary runs list | show RUN | events RUN [--follow] | export RUN
fiduciary runs resume RUN [--agent MODULE:FACTORY] [--any-model]
fiduciary approvals list | approve ID --by P [--agent ...] | deny ID --by P [--agent ...]
fiduciary serve | keys create | list | revoke        (the server extra)
fiduciary worker --agent MODULE:FACTORY --postgres DSN
```

The package, from the bottom up: ``_common`` (the boundary that turns failures into one line and
an exit code, the shared options, ids, formatting), ``terminal`` (rendering a run and asking a
person about its pending actions), ``runs`` (the ``runs`` and ``approvals`` groups), ``app``
(the root command). Domains register their own commands on the root, as ``register(app)``:
``fiduciary.server.cli`` (``serve``, ``keys``) and ``fiduciary.wallet.cli`` (``demo``,
``chat``). They import ``terminal`` and ``_common``, never ``app``; nothing here is
imported when this package is, so no import circles through it.
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """The ``fiduciary`` console script."""
    from .app import main as run  # deferred: the root imports the domains that import terminal

    run()
