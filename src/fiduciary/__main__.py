"""``python -m fiduciary``: the ``fiduciary`` command."""

from .cli import main

main()
