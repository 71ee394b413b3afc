"""Private: what ``Agent`` is made of beyond its public methods.

Each module owns one concern of the agent and is given what it needs, never the agent itself:
``options`` (``AgentOptions``, frozen), ``built`` (what is built of them once: the gates, the
memory layer, the ``Runtime``), ``runs`` (opening a run's drive, leases, the event stream),
``decisions`` (approve, deny, a client's result), ``cancelling`` (cancel, take over),
``following`` (a run's events, stored then live), ``sweep`` (resuming what nobody drives).
"""
