// What useChat does, with the ai package's own transport and stream reader, against a live
// fiduciary server: ask, answer the approval as addToolApprovalResponse does, send again (as
// sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses would), read on.
// Prints {first, complete, final, valid} as JSON; any stream part the ai package rejects throws.
import {
  DefaultChatTransport,
  isToolUIPart,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  safeValidateUIMessages,
} from 'ai';

const { FIDUCIARY_URL: api, FIDUCIARY_KEY: key, FIDUCIARY_QUESTION: question } = process.env;
const transport = new DefaultChatTransport({ api, headers: { Authorization: `Bearer ${key}` } });
const chatId = 'chat-from-node';

async function read(messages, message) {
  const stream = await transport.sendMessages({
    chatId,
    messages,
    trigger: 'submit-message',
    messageId: message?.id,
    abortSignal: undefined,
  });
  let last = message;
  for await (const snapshot of readUIMessageStream({ message, stream, terminateOnError: true })) {
    last = snapshot;
  }
  return last;
}

const user = { id: 'u1', role: 'user', parts: [{ type: 'text', text: question }] };
const first = await read([user]);
// addToolApprovalResponse({ id, approved: true })
const answered = {
  ...first,
  parts: first.parts.map((part) =>
    isToolUIPart(part) && part.state === 'approval-requested'
      ? { ...part, state: 'approval-responded', approval: { ...part.approval, approved: true } }
      : part,
  ),
};
const complete = lastAssistantMessageIsCompleteWithApprovalResponses({ messages: [user, answered] });
const final = await read([user, answered], answered);
const valid = await safeValidateUIMessages({ messages: [user, final] });
console.log(JSON.stringify({ first, complete, final, valid: valid.success }));
