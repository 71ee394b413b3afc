"""The shop agent (shop.py) from a notebook or a plain script, with the sync API: no ``await``.

    python examples/notebook.py

In Jupyter, run the cells below (``# %%``) in a notebook next to shop.py, or open this file as
one (VS Code, Jupytext). ``run_sync`` and friends work where an event loop is already running,
as one is in a notebook: they run the agent on an event loop of their own, in a thread.
"""

# %%
from fiduciary import approve_sync, resume_sync, run_sync
from shop import PRINCIPAL, Shop, build_agent

shop = Shop()
agent = build_agent(shop)

# %% A refund below $25 runs on its own
result = run_sync(
    agent, "Order A-1001 arrived with a chipped mug: refund 12 dollars.", principal=PRINCIPAL
)
print(result.status, "-", result.text)

# %% A larger one waits for a person
result = run_sync(agent, "Order A-1002 never arrived: refund it in full.", principal=PRINCIPAL)
print(result.status)
for card in result.pending:
    print(f"{card.description}: {card.tier}")

# %% Approve the card (bound to the exact arguments it showed); the run then goes on
approve_sync(agent, result.pending[0], by=PRINCIPAL)
result = resume_sync(agent, result.run_id)
print(result.status, "-", result.text)
print({order.id: str(order.refunded) for order in shop.orders.values()})
