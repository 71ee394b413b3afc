"""Private: the loop of one run — stream a model turn, dispatch its calls, suspend, finish.

``transcript``  the fold of a run's log into what the model and the guards need
``runtime``     what the loop is given by its agent (frozen), and the principal's lock
``writer``      emit, group commit, delivery after commit, lease renewal
``state``       one drive's shared state (``Drive``)
``turn``        one model turn
``dispatch``    the calls of a turn through the gates, their verdicts into the log
``settle``      approvals decided, calls a crash left open, cancel
``driver``      ``Driver``: a drive from where the log stands to the run's next stop
"""

from .driver import Driver
from .runtime import Held, Limits, Runtime
from .transcript import Transcript
from .writer import DONE

__all__ = ["DONE", "Driver", "Held", "Limits", "Runtime", "Transcript"]
