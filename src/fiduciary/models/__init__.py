"""Models: the ``Model`` seam and its implementations."""

from .base import Model, ModelEvent, ModelRequest
from .scripted import ScriptedModel

__all__ = ["Model", "ModelEvent", "ModelRequest", "ScriptedModel"]
