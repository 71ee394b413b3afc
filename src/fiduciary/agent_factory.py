"""Agents named on the command line: ``--agent module:attribute``.

The attribute is a factory ``(store) -> Agent``, or an object holding the agent as ``.agent``
(the server's ``ServedAgent``, which adds the balances its console shows). ``fiduciary serve``,
``worker``, ``runs resume`` and ``approvals approve | deny`` load theirs with ``load_factory``;
the current directory is on the import path, as for uvicorn's ``module:app``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from .agent import Agent
from .exceptions import ConfigurationError
from .stores.base import Store

__all__ = ["agent_of", "load_factory"]


def load_factory(spec: str) -> Callable[[Store], object]:
    """``module:attribute`` → the factory it names."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"--agent must be module:attribute, not {spec!r}")
    # as uvicorn does: a module beside the person (`--agent mymodule:make`) is found without
    # PYTHONPATH=.
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ConfigurationError(f"{spec} is not a callable agent factory")
    checked: Callable[[Store], object] = factory
    return checked


def agent_of(made: object, spec: str) -> Agent:
    """The agent a factory made: an ``Agent``, or the ``.agent`` of what it returned."""
    agent = getattr(made, "agent", made)
    if not isinstance(agent, Agent):
        raise ConfigurationError(
            f"{spec} must return an Agent or a ServedAgent, not {type(made).__name__}"
        )
    return agent
