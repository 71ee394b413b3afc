"""Tool results shortened for a terminal line: at a JSON boundary, never inside a value."""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

from rich.console import Console

from fiduciary.cli.terminal import Renderer, brief
from fiduciary.events import ToolCallEnd
from fiduciary.stores.sqlite import SQLiteStore

RECEIPT = {
    "digest": "A8yUqnohL4Bi88YEcH1THFzCeArrc3iregEysYcXri4y",
    "kind": "send",
    "label": "Sent 75.00 USDC to 0x7a3b…b3c4",
    "at": "2026-12-01T19:22:49.940163Z",
    "changes": [{"book": "available", "asset": "USDC", "amount": "-75.000000"}],
    "balances": [{"book": "available", "amount": "905.000000"}],
    "details": {"to": "0x7a3b9c2d4e5f60718293a4b5c6d7e8f901a2b3c4", "memo": "rent"},
}


def test_a_long_receipt_keeps_whole_values_and_counts_the_rest() -> None:
    shown = brief(json.dumps(RECEIPT) + "\n\n[notes] a note", 120)
    assert len(shown) <= 120
    assert shown.startswith(
        '{"digest": "A8yUqnohL4Bi88YEcH1THFzCeArrc3iregEysYcXri4y", "kind": "send"'
    )
    assert re.search(r", … \d more\}$", shown)
    assert "[notes]" not in shown


def test_a_short_result_is_shown_whole_and_prose_is_cut_between_words() -> None:
    assert brief('{"ok": true}') == '{"ok": true}'
    assert (
        brief("the quote expired a minute ago; ask for another", 30)
        == "the quote expired a minute…"
    )
    long_text = json.dumps({"message": "word " * 60})
    assert brief(long_text, 60).endswith('…"}')


def _values(text: str) -> list[str]:
    return re.findall(r'"((?:[^"\\]|\\.)*)"', text)


def test_no_value_of_the_demo_is_cut(demo_db: Path) -> None:
    async def ends() -> list[ToolCallEnd]:
        store = SQLiteStore(demo_db)
        try:
            (run,) = await store.list_runs()
            return [e for e in await store.read_events(run.run_id) if isinstance(e, ToolCallEnd)]
        finally:
            await store.close()

    out = io.StringIO()
    render = Renderer(Console(file=out, width=400))
    for end in asyncio.run(ends()):
        render(end)
        whole = json.dumps(json.loads(end.output.split("\n\n[notes] ")[0]), ensure_ascii=False)
        # every string shown is one of the result's strings, whole (keys too)
        assert all(f'"{v}"' in whole for v in _values(brief(end.output))), end.output
    assert out.getvalue().count("✓") == 9  # the send refreshes the balance
    assert "..." not in out.getvalue()
