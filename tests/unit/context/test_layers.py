"""The layered system prompt: a fixed order, empty layers skipped, the stable prefix counted."""

from __future__ import annotations

from fiduciary.context.layers import SystemPrompt, recall_block


def test_layers_in_order_and_empty_ones_skipped() -> None:
    prompt = SystemPrompt.assemble(
        ("base", "rules"),
        context="<financial_context>12 USDC</financial_context>",
        recall=recall_block(["paid Alice 3 times", "prefers  savings\nfirst"]),
        skill="<skill>rebalance</skill>",
    )
    assert prompt.stable == 2
    assert prompt.layers[:2] == ("base", "rules")
    assert prompt.layers[2] == "<financial_context>12 USDC</financial_context>"
    assert prompt.layers[3].startswith("<memory_recall>\n")
    assert "- paid Alice 3 times\n- prefers savings first\n</memory_recall>" in prompt.layers[3]
    assert prompt.layers[4] == "<skill>rebalance</skill>"
    only_skill = SystemPrompt.assemble(("base",), skill="s")
    assert only_skill.layers == ("base", "s")


def test_with_nothing_configured_the_system_prompt_is_the_base_unchanged() -> None:
    assert SystemPrompt.assemble(("base", "")).layers == ("base", "")
    assert recall_block([]) == ""
