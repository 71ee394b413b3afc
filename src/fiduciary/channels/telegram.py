"""Telegram: a chat with fiduciary's runs and approvals, over the Bot API by long polling.

Built on python-telegram-bot (the ``telegram`` extra) used as a typed Bot API client only —
``Bot.get_updates`` / ``send_message`` / ``answer_callback_query`` /
``edit_message_reply_markup`` — never its ``Application``, whose poller keeps the offset in
memory. Here the offset is ours (``ChannelRecords``):

1. each update is **recorded** first (an insert keyed by ``update_id``; one recorded already is
   skipped, so a restart never handles an update twice);
2. then handled; then marked handled;
3. then the offset (``update_id + 1``) is committed. A crash before 3 makes Telegram send the
   update again, and step 1 skips it.

Chats: ``allow`` maps chat ids to principals; any other chat is ignored (no answer) and audited.
A group chat (any chat that is not private) is refused unless ``groups=True``: its members,
present and future, all write in it.

People: a chat is not a person. Each principal is linked to one Telegram user id
(``channels.links``: ``/link CODE`` sent from the person's own account, in a private chat,
with a code from ``fiduciary telegram link``), and every message and every press in an allowed
chat is checked against it (``from_user``): anyone else, or anyone while no account is linked,
is refused with a clear answer and audited, and nothing reaches the agent.

A message from the linked person goes to ``inbox.deliver(target, ...)`` (one rate limit,
serial per target) and its reply is sent back, split at Telegram's 4096-character limit.

Approvals: each pending action of a chat's principal becomes one card with Approve / Deny
buttons (and New quote, ``r:<token>``, when its capability can make fresh arguments).
``callback_data`` is at most 64 bytes, so a button carries ``a:<token>`` or
``d:<token>``, where the token (16 URL-safe characters, 96 random bits) is kept server side
bound to (approval id, args digest, chat, principal). A press is honoured only from the card's
own chat, for an approval of that chat's principal that is still pending with the same args
digest; anything else — an unknown token, another chat, a changed digest — is refused and
audited. An ``explicit`` action asks the person to type its amount, passed on as
``confirm_amount``.

Questions (``ask_person``): a question of a chat's principal is a card too, with one button
per choice (``c<n>:<token>``, checked as an approval's buttons are), or, with no choices, the
person's next message in that chat is the answer. The answer is ``Agent.answer``'s; the run
is then driven on and its reply sent.

The bot token: the client (``telegram_bot.TelegramBot``) keeps it out of logs, errors and
every text sent; text going to a target is scrubbed too.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from uuid import UUID

from .._logs import logger
from ..agent import Agent
from ..capabilities import Capability
from ..clock import Clock, SystemClock
from ..events import GuardNote, PendingAction
from ..exceptions import (
    ApprovalError,
    ConfigurationError,
    FiduciaryError,
    RunError,
    StoreError,
)
from ..questions import PendingQuestion, is_question
from ..stores.base import ApprovalRecord
from .agent_chat import collect
from .inbox import ChannelError, Inbox, RateLimitError, Reply
from .links import LinkRefused, PersonLinks
from .records import Card, ChannelRecords
from .telegram_bot import TelegramBot, TelegramError, guard_library_logs

try:
    import telegram
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
except ImportError as exc:  # pragma: no cover - the extra is in dev
    raise ImportError(
        "the Telegram channel needs the 'telegram' extra: pip install 'fiduciary[telegram]'"
    ) from exc

__all__ = [
    "DEFAULT_API",
    "TelegramChannel",
    "TelegramError",
    "channel_name",
    "guard_library_logs",
]

log = logger("fiduciary.channels.telegram")

DEFAULT_API = "https://api.telegram.org"

NOT_VALID = "This button is not valid."
DECIDED = "This action was already decided or has expired."
STALE = "This action changed since this card was sent: nothing was approved."
TYPE_AMOUNT = "To approve, type the amount of this action in USD (for example 25.00)."
NOT_AN_AMOUNT = "That is not an amount: type the amount in USD, or press Deny."
ANSWER_BELOW = "Reply with your answer."
FAILED = "That message could not be handled."
NOT_THE_PERSON = "Only the person linked to this chat can do this: nothing was done."
NOT_LINKED = (
    "Nothing was done: no Telegram account is linked for this chat yet. Get a code with "
    "`fiduciary telegram link --principal NAME` and send /link CODE to this bot in a private chat."
)
GROUP_REFUSED = "This bot does not act in group chats: nothing was done."
LINKED = (
    "Linked: your Telegram account (user id {user_id}) now acts for {principal}. "
    "This chat's id is {chat_id}."
)
LINK_USAGE = "Send /link followed by your code, like /link ABCD-EFGH-JKMN."
LINK_IN_GROUP = (
    "Send /link to this bot in a private chat. A code sent in a group is seen by others, "
    "so it no longer works: get a new one."
)
LINK_REFUSED = {
    "unknown": "That link code is not valid: nothing was linked.",
    "used": "That link code was used already: get a new one.",
    "expired": "That link code has expired: get a new one.",
}

RETRY_SECONDS = 1.0


def channel_name(token: str) -> str:
    """``telegram:<bot id>``: the bot id is the token's public part, before the colon."""
    bot_id, sep, secret = token.partition(":")
    if not sep or not bot_id.isdigit() or not secret:
        raise ConfigurationError("a Telegram bot token looks like 123456:ABC-DEF...")
    return f"telegram:{bot_id}"


@dataclass(frozen=True, slots=True)
class _Chat:
    chat_id: int
    principal: str


class TelegramChannel:
    """One bot: polls updates, answers allowed chats through ``inbox``, turns pending actions
    into cards and presses into decisions on ``agent`` (see the module docstring)."""

    def __init__(
        self,
        *,
        token: str,
        agent: Agent,
        inbox: Inbox,
        target: str,
        allow: Mapping[int, str],
        records: ChannelRecords,
        groups: bool = False,
        links: PersonLinks | None = None,
        api: str = DEFAULT_API,
        poll_timeout: int = 30,
        clock: Clock | None = None,
        after_handled: Callable[[int], None] | None = None,
    ) -> None:
        if records.channel != channel_name(token):
            raise ConfigurationError("the records are another bot's")
        if target not in inbox:
            raise ConfigurationError(f"no target {target!r} in the inbox")
        self.client = TelegramBot(token, api=api, poll_timeout=poll_timeout)
        self.redactor = self.client.redactor
        self.bot = self.client.bot
        self.agent = agent
        self.inbox = inbox
        self.target = target
        self.allow = {int(k): v for k, v in allow.items()}
        grouped = sorted(chat for chat in self.allow if chat < 0)  # groups' ids are negative
        if grouped and not groups:
            raise ConfigurationError(
                f"chat {grouped[0]} is a group chat: allow group chats explicitly "
                "(--allow-groups), knowing that every member can write in them"
            )
        self.groups = groups
        self.records = records
        self.links = links or PersonLinks(records.sql)
        self.poll_timeout = poll_timeout
        self.clock: Clock = clock or SystemClock()
        # a test's crash point: after an update is handled, before the offset is committed
        self._after_handled = after_handled

    # --- the client, with the token scrubbed --------------------------------------------------
    def scrub(self, text: str) -> str:
        return self.client.scrub(text)

    async def start(self) -> None:
        """Check the token (``getMe``)."""
        await self.client.start()

    async def close(self) -> None:
        try:
            await self.client.shutdown()
        finally:
            await self.records.close()

    # --- polling --------------------------------------------------------------------------------
    async def run_forever(self, *, stop: asyncio.Event | None = None) -> None:
        """Poll and answer until ``stop`` is set (or the task is cancelled)."""
        stop = stop or asyncio.Event()
        await self.announce_pending()
        while not stop.is_set():
            try:
                await self.poll_once()
            except TelegramError as exc:
                log.warning("telegram: %s; polling again", exc)
                await asyncio.sleep(exc.retry_after or RETRY_SECONDS)
            except StoreError as exc:  # asked for again; what was recorded is never run twice
                log.warning("telegram: the store failed (%s); polling again", exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def poll_once(self, *, wait_seconds: int | None = None) -> int:
        """One ``getUpdates``: record each update, handle the new ones (each chat's in order,
        chats concurrently), then commit the offset past them; then send cards for actions
        waiting. Returns how many updates were handled now."""
        offset = await self.records.next_offset()
        updates = await self.client.call(
            self.bot.get_updates(
                offset=offset,
                timeout=self.poll_timeout if wait_seconds is None else wait_seconds,
                allowed_updates=["message", "callback_query"],
            )
        )
        by_chat: dict[int | None, list[Update]] = {}
        for update in updates:
            before = await self.records.record_update(update.update_id, self.clock.now())
            if before is None:
                by_chat.setdefault(_chat_id(update), []).append(update)
            elif before == "received":  # a crash interrupted its handling: not run again
                await self.records.audit(
                    self.clock.now(),
                    _chat_id(update),
                    "interrupted",
                    f"update {update.update_id} was interrupted and is not handled again",
                )
        await asyncio.gather(*(self._handle_in_order(chat) for chat in by_chat.values()))
        if updates:
            await self.records.commit_offset(max(u.update_id for u in updates) + 1)
        await self.announce_pending()
        return sum(len(chat) for chat in by_chat.values())

    async def _handle_in_order(self, updates: list[Update]) -> None:
        for update in updates:
            try:
                await self._handle(update)
            except (FiduciaryError, ChannelError) as exc:
                log.warning("telegram update %s: %s", update.update_id, self.scrub(str(exc)))
            except Exception:  # a target's bug: logged (redacted), the chat told, polling goes on
                log.exception("telegram update %s could not be handled", update.update_id)
                chat_id = _chat_id(update)
                if chat_id is not None and chat_id in self.allow:
                    with suppress(TelegramError):
                        await self.say(chat_id, FAILED)
            await self.records.handled(update.update_id)
            if self._after_handled is not None:
                self._after_handled(update.update_id)

    async def _handle(self, update: Update) -> None:
        chat_id = _chat_id(update)
        if chat_id is None:
            return
        if update.message is not None and _is_link(update.message.text):
            await self._link(update.message)
            return
        principal = self.allow.get(chat_id)
        if principal is None:
            await self.records.audit(
                self.clock.now(),
                chat_id,
                "ignored",
                f"update {update.update_id} from a chat that is not allowed",
            )
            log.warning(
                "telegram: ignored update %s from chat %s (user %s)",
                update.update_id,
                chat_id,
                _user_id(update),
            )
            if update.callback_query is not None:
                await self.client.call(update.callback_query.answer())
            return
        chat = _Chat(chat_id, principal)
        if not await self._from_the_person(chat, update):
            return
        if update.callback_query is not None:
            await self._press(chat, update.callback_query)
        elif update.message is not None and update.message.text:
            await self._message(chat, self.scrub(update.message.text))

    # --- people ---------------------------------------------------------------------------------
    async def _from_the_person(self, chat: _Chat, update: Update) -> bool:
        """Whether ``update`` comes from the account linked to the chat's principal, in a
        chat of an allowed kind; if not it is refused, answered and audited."""
        kind = _chat_type(update)
        user = _user_id(update)
        linked = await self.links.user_of(chat.principal)
        if kind != "private" and not self.groups:
            what, text = "group_refused", GROUP_REFUSED
            detail = f"update {update.update_id} from a {kind} chat (user {user})"
        elif linked is None:
            what, text = "unlinked", NOT_LINKED
            detail = f"update {update.update_id} from user {user}: no account linked"
        elif user != linked:
            what, text = "not_the_person", NOT_THE_PERSON
            detail = f"update {update.update_id} from user {user}, not the linked account"
        else:
            return True
        await self._refuse(chat, what, f"{detail} for {chat.principal}")
        if update.callback_query is not None:
            await self.client.call(update.callback_query.answer(text, show_alert=True))
        else:
            await self.say(chat.chat_id, text)
        return False

    async def _link(self, message: telegram.Message) -> None:
        """``/link CODE``: link the sender's account to the code's principal."""
        now, chat_id = self.clock.now(), message.chat.id
        words = (message.text or "").split(maxsplit=1)
        code = words[1].strip() if len(words) > 1 else ""
        if message.chat.type != "private":
            if code:
                await self.links.burn(code, now=now)
            await self.records.audit(now, chat_id, "link_refused", "a link code sent in a group")
            await self.say(chat_id, LINK_IN_GROUP)
            return
        if not code or message.from_user is None:
            await self.say(chat_id, LINK_USAGE)
            return
        user = message.from_user.id
        result = await self.links.redeem(code, user, now=now)
        if isinstance(result, LinkRefused):
            await self.records.audit(
                now, chat_id, "link_refused", f"user {user}: a code {result.reason}"
            )
            await self.say(chat_id, LINK_REFUSED[result.reason])
            return
        await self.records.audit(now, chat_id, "linked", f"user {user} acts for {result.principal}")
        await self.say(
            chat_id, LINKED.format(user_id=user, principal=result.principal, chat_id=chat_id)
        )

    # --- messages -------------------------------------------------------------------------------
    async def _message(self, chat: _Chat, text: str) -> None:
        token = await self.records.awaiting_amount(chat.chat_id)
        if token is not None:
            card = await self.records.card(token)
            if card is not None and await self._question(card) is not None:
                await self.records.stop_awaiting(chat.chat_id)
                await self._answer(chat, card, None, text)
                return
            await self._typed_amount(chat, token, text)
            return
        # a group is not the principal's own chat: its messages are an outside event's
        channel = "telegram" if chat.chat_id > 0 else "telegram:group"
        try:
            reply = await self.inbox.deliver(
                self.target, principal=chat.principal, text=text, channel=channel
            )
        except RateLimitError as exc:
            reply = Reply(f"Too many messages: {exc.message.removeprefix('too many messages: ')}.")
        await self.say(chat.chat_id, reply.text)

    async def say(self, chat_id: int, text: str) -> None:
        """Send ``text`` to the chat, split at Telegram's limit."""
        await self.client.say(chat_id, text)

    # --- cards ----------------------------------------------------------------------------------
    async def announce_pending(self) -> None:
        """A card for every pending action of an allowed chat's principal that has none yet
        (or whose sending was interrupted)."""
        for chat_id, principal in self.allow.items():
            cards = {c.approval_id: c for c in await self.records.cards_of(chat_id)}
            for approval in await self.agent.pending_approvals(principal=principal):
                card = cards.get(approval.approval_id)
                if card is None:
                    card = Card(
                        token=secrets.token_urlsafe(12),
                        chat_id=chat_id,
                        approval_id=approval.approval_id,
                        args_digest=approval.args_digest,
                        principal=principal,
                        message_id=None,
                    )
                    if not await self.records.add_card(card, self.clock.now()):
                        continue
                elif card.message_id is not None:
                    continue
                if is_question(approval):
                    sent = await self.client.send(
                        chat_id, question_text(approval), _choices(card.token, approval)
                    )
                    if not approval.args.get("choices"):  # the next message answers it
                        await self.records.await_amount(chat_id, card.token)
                    await self.records.card_sent(card.token, sent)
                    continue
                notes = await self._notes(approval)
                buttons = _buttons(card.token, self.agent.gates.get(approval.capability))
                sent = await self.client.send(chat_id, card_text(approval, notes), buttons)
                await self.records.card_sent(card.token, sent)

    async def _notes(self, approval: ApprovalRecord) -> list[GuardNote]:
        """The guards' notes its pending action recorded (their sentences for the person)."""
        for event in await self.agent.store.read_events(approval.run_id):
            if isinstance(event, PendingAction) and event.approval_id == approval.approval_id:
                return list(event.guard_notes)
        return []

    async def _press(self, chat: _Chat, query: telegram.CallbackQuery) -> None:
        verb, _, token = (query.data or "").partition(":")
        choice = verb[1:] if verb[:1] == "c" and verb[1:].isdigit() else None
        known = verb in ("a", "d", "r") or choice is not None
        card = await self.records.card(token) if known and token else None
        if card is None or card.chat_id != chat.chat_id or card.principal != chat.principal:
            await self._refuse(chat, "forged", f"button {query.data!r} is not this chat's")
            await self.client.call(query.answer(NOT_VALID, show_alert=True))
            return
        approval = await self._pending(card)
        if approval is None:
            await self.client.call(query.answer(DECIDED, show_alert=True))
            await self.client.drop_buttons(card)
            return
        if approval.args_digest != card.args_digest or approval.principal != chat.principal:
            await self._refuse(chat, "stale", f"approval {approval.approval_id}: digest changed")
            await self.client.call(query.answer(STALE, show_alert=True))
            await self.client.drop_buttons(card)
            return
        if (choice is not None) != is_question(approval):  # a choice is a question's only
            await self._refuse(chat, "forged", f"button {query.data!r} is not this card's")
            await self.client.call(query.answer(NOT_VALID, show_alert=True))
            return
        if choice is not None:
            await self._answer(chat, card, query, str(int(choice) + 1))  # a choice's number
            return
        if verb in ("d", "r"):  # r: New quote (fresh arguments, a new card)
            await self._decide(chat, card, query, approve=False if verb == "d" else None)
        elif approval.tier == "explicit" and approval.amount_usd is not None:
            await self.records.await_amount(chat.chat_id, card.token)
            await self.client.call(query.answer())
            await self.say(chat.chat_id, TYPE_AMOUNT)
        else:
            await self._decide(chat, card, query, approve=True)

    async def _typed_amount(self, chat: _Chat, token: str, text: str) -> None:
        card = await self.records.card(token)
        try:
            amount = Decimal(text.strip().lstrip("$").replace(",", ""))
        except InvalidOperation:
            await self.say(chat.chat_id, NOT_AN_AMOUNT)
            return
        await self.records.stop_awaiting(chat.chat_id)
        if card is None or not amount.is_finite():
            await self.say(chat.chat_id, NOT_AN_AMOUNT)
            return
        await self._decide(chat, card, None, approve=True, amount=amount)

    async def _decide(
        self,
        chat: _Chat,
        card: Card,
        query: telegram.CallbackQuery | None,
        *,
        approve: bool | None,  # None: a new quote (Agent.regenerate)
        amount: Decimal | None = None,
    ) -> None:
        said = {True: "Approved.", False: "Denied.", None: "A new quote was asked for."}[approve]
        try:
            if approve is None:
                record = await self.agent.regenerate(
                    card.approval_id, by=chat.principal, args_digest=card.args_digest
                )
            elif approve:
                record = await self.agent.approve(
                    card.approval_id,
                    by=chat.principal,
                    args_digest=card.args_digest,
                    confirm_amount=amount,
                )
            else:
                record = await self.agent.deny(
                    card.approval_id, by=chat.principal, reason="denied on Telegram"
                )
        except (ApprovalError, RunError) as exc:  # RunError: e.g. another agent's run
            await self._refuse(chat, f"refused:{exc.code}", exc.message)
            if query is not None:
                await self.client.call(query.answer(self.scrub(exc.message)[:200], show_alert=True))
            else:
                await self.say(chat.chat_id, f"Not approved: {exc.message}")
            return
        if query is not None:
            await self.client.call(query.answer(said))
        await self.client.drop_buttons(card)
        await self.say(chat.chat_id, said)
        await self._continue(chat, record.run_id)

    async def _question(self, card: Card) -> ApprovalRecord | None:
        approval = await self._pending(card)
        return approval if approval is not None and is_question(approval) else None

    async def _answer(
        self, chat: _Chat, card: Card, query: telegram.CallbackQuery | None, text: str
    ) -> None:
        """The person's answer to a question (a choice pressed, or a message typed)."""
        try:
            record = await self.agent.answer(card.approval_id, text, by=chat.principal)
        except (ApprovalError, RunError) as exc:
            await self._refuse(chat, f"refused:{exc.code}", exc.message)
            if query is not None:
                await self.client.call(query.answer(self.scrub(exc.message)[:200], show_alert=True))
            else:
                await self.say(chat.chat_id, f"Not answered: {exc.message}")
            return
        answer = PendingQuestion.of(record).answer or ""
        if query is not None:
            await self.client.call(query.answer("Answered."))
        await self.client.drop_buttons(card)
        await self.say(chat.chat_id, f"Answered: {answer}")
        await self._continue(chat, record.run_id)

    async def _continue(self, chat: _Chat, run_id: UUID) -> None:
        """Drive the run on after a decision and tell the chat what it said."""
        try:
            reply = await collect(self.agent, run_id, self.agent.resume(run_id))
        except RunError as exc:  # driven elsewhere (a worker, an app's engine): it goes on there
            log.info("telegram: run %s continues elsewhere (%s)", run_id, exc.code)
            return
        await self.say(chat.chat_id, reply.text)

    async def _pending(self, card: Card) -> ApprovalRecord | None:
        for approval in await self.agent.pending_approvals(principal=card.principal):
            if approval.approval_id == card.approval_id:
                return approval
        return None

    async def _refuse(self, chat: _Chat, what: str, detail: str) -> None:
        await self.records.audit(self.clock.now(), chat.chat_id, what, self.scrub(detail))
        log.warning("telegram chat %s: %s (%s)", chat.chat_id, what, self.scrub(detail))


def card_text(approval: ApprovalRecord, notes: Sequence[GuardNote] = ()) -> str:
    """What a card says: the action, its arguments, the amount, the guards' notes (the
    sentences written for the person), how to approve it."""
    lines = [f"Approve {approval.capability}?"]
    lines += [f"  {name}: {value}" for name, value in approval.args.items()]
    if approval.amount_usd is not None:
        lines.append(f"Amount: ${approval.amount_usd:,.2f}")
    lines += [f"{'Warning' if n.verdict == 'warn' else 'Note'}: {n.shown}" for n in notes]
    lines.append(f"Expires: {approval.expires_at:%Y-%m-%d %H:%M} UTC")
    if approval.tier == "explicit" and approval.amount_usd is not None:
        lines.append("To approve, press Approve and type the amount.")
    return "\n".join(lines)


def question_text(approval: ApprovalRecord) -> str:
    """What a question's card says: the question, its choices numbered (or how to answer)."""
    question = PendingQuestion.of(approval)
    lines = [f"Question: {question.question}"]
    lines += [f"  {n}. {choice}" for n, choice in enumerate(question.choices, 1)]
    lines.append(f"Expires: {approval.expires_at:%Y-%m-%d %H:%M} UTC")
    if not question.choices:
        lines.append(ANSWER_BELOW)
    return "\n".join(lines)


def _choices(token: str, approval: ApprovalRecord) -> InlineKeyboardMarkup | None:
    """One button per choice, one per row (a choice's text may be long)."""
    choices = PendingQuestion.of(approval).choices
    if not choices:
        return None
    return InlineKeyboardMarkup(
        [
            [InlineKeyboardButton(choice[:60], callback_data=f"c{n}:{token}")]
            for n, choice in enumerate(choices)
        ]
    )


def _buttons(token: str, cap: Capability | None = None) -> InlineKeyboardMarkup:
    row = [
        InlineKeyboardButton("Approve", callback_data=f"a:{token}"),
        InlineKeyboardButton("Deny", callback_data=f"d:{token}"),
    ]
    if cap is not None and cap.regenerate is not None:  # it can make fresh arguments
        row.append(InlineKeyboardButton("New quote", callback_data=f"r:{token}"))
    return InlineKeyboardMarkup([row])


def _is_link(text: str | None) -> bool:
    """``/link ...`` or ``/link@thisbot ...``."""
    command = (text or "").split(maxsplit=1)[0] if (text or "").strip() else ""
    return command.partition("@")[0] == "/link"


def _user_id(update: Update) -> int | None:
    if update.callback_query is not None:
        return update.callback_query.from_user.id
    if update.message is not None and update.message.from_user is not None:
        return update.message.from_user.id
    return None


def _chat_type(update: Update) -> str | None:
    if update.callback_query is not None:
        message = update.callback_query.message
        return None if message is None else str(message.chat.type)
    if update.message is not None:
        return str(update.message.chat.type)
    return None


def _chat_id(update: Update) -> int | None:
    if update.callback_query is not None:
        message = update.callback_query.message
        return None if message is None else message.chat.id
    if update.message is not None:
        return update.message.chat.id
    return None
