"""What the model is sent, shaped from the log: microcompact, stubs, cut points, the summary."""

from __future__ import annotations

from fiduciary.context.shaping import (
    SUMMARY_OPEN,
    cut_points,
    microcompact,
    stub_results,
    with_summary,
)
from fiduciary.models.base import (
    AssistantMessage,
    Message,
    TextPart,
    ToolResult,
    ToolResultsMessage,
    ToolUsePart,
    UserTextMessage,
)

BIG = '{"account": "main", "usd": "250.00", "history": "' + "x" * 300 + '"}'


def call(id_: str, name: str, **args: object) -> AssistantMessage:
    return AssistantMessage((ToolUsePart(id_, name, dict(args)),))


def result(id_: str, content: str, *, error: bool = False) -> ToolResultsMessage:
    return ToolResultsMessage((ToolResult(id_, content, error),))


def reads(name: str) -> bool:
    return name in {"balance", "quote"}


def contents(messages: tuple[Message, ...] | list[Message]) -> list[str]:
    return [r.content for m in messages if isinstance(m, ToolResultsMessage) for r in m.results]


def test_a_repeated_read_points_to_the_turn_that_first_returned_it() -> None:
    messages: list[Message] = [
        UserTextMessage("balance?"),
        call("a", "balance", account="main"),
        result("a", BIG),
        UserTextMessage("again?"),
        call("b", "balance", account="main"),
        result("b", BIG),
    ]
    sent = microcompact(messages, reads)
    assert contents(sent) == [BIG, "[Same result as turn 1]"]
    assert len(sent) == len(messages)
    assert sent[0] == messages[0]
    assert contents(microcompact(messages, reads, first_turn=5))[1] == "[Same result as turn 5]"


def test_writes_errors_other_arguments_and_changed_outputs_are_never_deduplicated() -> None:
    messages: list[Message] = [
        call("a", "pay", to="alice", amount="5"),
        result("a", BIG),
        call("b", "pay", to="alice", amount="5"),
        result("b", BIG),  # a write: the second payment is a second payment
        call("c", "balance", account="main"),
        result("c", BIG, error=True),
        call("d", "balance", account="main"),
        result("d", BIG, error=True),  # failed calls stay as they are
        call("e", "balance", account="savings"),
        result("e", BIG),  # other arguments
        call("f", "balance", account="savings"),
        result("f", BIG + " "),  # other output
    ]
    assert contents(microcompact(messages, reads)) == contents(tuple(messages))


def test_a_short_result_is_kept_rather_than_replaced_by_a_longer_marker() -> None:
    messages: list[Message] = [call("a", "quote"), result("a", "1"), call("b", "quote")]
    messages.append(result("b", "1"))
    assert contents(microcompact(messages, reads)) == ["1", "1"]


def test_cut_points_never_separate_a_call_from_its_result() -> None:
    messages: list[Message] = [
        UserTextMessage("one"),  # 0
        call("a", "balance"),
        result("a", "1"),
        UserTextMessage("two"),  # 3
        call("b", "pay"),  # its result comes after the next user message: no cut at 5
        UserTextMessage("three"),
        result("b", "ok"),
        UserTextMessage("four"),  # 7
    ]
    assert cut_points(messages) == [0, 3, 7]


def test_old_long_results_become_stubs_and_the_call_stays() -> None:
    messages: list[Message] = [
        call("a", "balance"),
        result("a", BIG),
        call("b", "pay", amount="5"),
        result("b", "x" * 250, error=True),
        call("c", "balance"),
        result("c", BIG),
    ]
    stubbed = stub_results(messages, before=4)
    got = contents(stubbed)
    assert got[0].startswith("[Older result of balance removed to save context (")
    assert "the call succeeded" in got[0]
    assert "the call failed" in got[1]
    assert got[2] == BIG
    assert stubbed[2] == messages[2]  # the call and its arguments stay visible


def test_the_summary_is_merged_into_the_first_kept_user_message() -> None:
    messages: list[Message] = [UserTextMessage("old"), UserTextMessage("new")]
    kept = with_summary(messages, 1, "They paid Alice.")
    assert len(kept) == 1
    assert isinstance(kept[0], UserTextMessage)
    assert kept[0].text.startswith(SUMMARY_OPEN)
    assert "They paid Alice." in kept[0].text
    assert kept[0].text.endswith("\n\nnew")
    assert with_summary(messages, 1, None) == [UserTextMessage("new")]
    assert with_summary([AssistantMessage((TextPart("hi"),))], 0, "s")[0] == UserTextMessage(
        f"{SUMMARY_OPEN}\ns\n</earlier_conversation_summary>"
    )
