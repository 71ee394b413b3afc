"""The delegation tree over HTTP (``GET /runs/{id}/tree``) and typed output in the run list:
a manager → worker → sub-worker delegation made with scripted models, read back through a
served app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fiduciary.server import MemoryKeyStore, create_app
from fiduciary.stores.sqlite import SQLiteStore
from tests.run_tree_scenario import Tree, agents, make_tree

from .conftest import bearer, client_for, problem

pytestmark = pytest.mark.timeout(60)


def shape(node: dict[str, Any]) -> list[Any]:
    """A node as [delegate, status, [children...]]."""
    return [node["delegate"], node["status"], [shape(c) for c in node["children"]]]


async def test_the_tree_of_a_delegation_and_the_typed_output_in_the_list(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.sqlite3")
    try:
        tree: Tree = await make_tree(store)
        keys = MemoryKeyStore()
        alice, _ = await keys.create("alice", ["runs:read"])
        bob, _ = await keys.create("bob", ["runs:read"])
        app = create_app(agents(store), keys=keys, resume_on_start=False)
        async with client_for(app) as http:
            top = await http.get(f"/runs/{tree.manager}/tree", headers=bearer(alice))
            assert top.status_code == 200, top.text
            body = top.json()
            assert body["parents"] == []
            root = body["tree"]
            assert root["run_id"] == str(tree.manager)
            assert shape(root) == [
                None,
                "completed",
                [["worker", "completed", [["sub", "completed", []]]]],
            ]
            [worker] = root["children"]
            [sub] = worker["children"]
            assert (worker["run_id"], sub["run_id"]) == (str(tree.worker), str(tree.sub))
            assert (worker["title"], sub["title"]) == ("check the balance", "read the balance")
            # each its own cost; the total adds every run below (as the budget counts them)
            for node in (root, worker, sub):
                assert float(node["cost_usd"]) > 0
            assert float(sub["total_cost_usd"]) == float(sub["cost_usd"])
            assert float(root["total_cost_usd"]) == pytest.approx(
                float(root["cost_usd"]) + float(worker["cost_usd"]) + float(sub["cost_usd"])
            )
            # the sub-worker's breadcrumbs: the person's run first
            below = (await http.get(f"/runs/{tree.sub}/tree", headers=bearer(alice))).json()
            assert [(p["run_id"], p["delegate"], p["status"]) for p in below["parents"]] == [
                (str(tree.manager), None, "completed"),
                (str(tree.worker), "worker", "completed"),
            ]
            assert below["tree"]["children"] == []
            # another principal sees no tree of alice's
            problem(await http.get(f"/runs/{tree.sub}/tree", headers=bearer(bob)), 404, "not_found")
            # the list carries each completed run's typed output, as GET /runs/{id} does
            listed = (await http.get("/runs", headers=bearer(alice))).json()["runs"]
            outputs = {r["run_id"]: r["output"] for r in listed}
            answer = {"balance_usd": "42", "checked_by": "worker"}
            assert outputs == {
                str(tree.manager): answer,
                str(tree.worker): None,
                str(tree.sub): None,
            }
            one = (await http.get(f"/runs/{tree.manager}", headers=bearer(alice))).json()
            assert one["output"] == answer
            spec = (await http.get("/openapi.json")).json()
            assert "/runs/{run_id}/tree" in spec["paths"]
    finally:
        await store.close()
