"""The package's version, in a module of its own: the server and the MCP server report it
without importing the public facade (``fiduciary/__init__.py``) that sits above them."""

__version__ = "0.1.0"
