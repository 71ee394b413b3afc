"""The built-in to-do list: ``update_todo``, a read capability the model uses to show its plan.

It replaces the whole list each time (idempotent: calling it twice with the same list changes
nothing), touches nothing outside the run, and the loop records every accepted list as a
``todo_update`` event carrying it whole, which the console and the terminal show. Add it to an
agent's capabilities: ``Agent(capabilities=[..., update_todo])``.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..capabilities import capability
from ..events import TodoItem

__all__ = ["TODO_FLAG", "TodoList", "update_todo"]

TODO_FLAG = "todo_list"  # a capability with this flag has its accepted list recorded as an event


class TodoList(BaseModel):
    todos: list[TodoItem] = Field(
        max_length=50,
        description="The whole list, in order; it replaces the previous one.",
    )


@capability(
    name="update_todo",
    kind="read",
    flags=[TODO_FLAG],
    input_model=TodoList,
    description=(
        "Show the person your plan for a task of several steps as a to-do list, and update it "
        "as you go (each call replaces the whole list: mark steps in_progress, then done). It "
        "changes nothing else."
    ),
)
async def update_todo(args: TodoList) -> dict[str, int]:
    done = sum(1 for item in args.todos if item.status == "done")
    return {"steps": len(args.todos), "done": done}
