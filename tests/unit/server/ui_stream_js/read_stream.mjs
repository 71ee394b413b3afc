// A UI message stream given on stdin, read as useChat reads a response: through the ai
// package's DefaultChatTransport (its own parser and part schema; fetch answers with the stream)
// and readUIMessageStream. Prints the last message as JSON; a part the package rejects throws.
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import { readFileSync } from 'node:fs';

const body = readFileSync(0, 'utf8');
const headers = { 'content-type': 'text/event-stream', 'x-vercel-ai-ui-message-stream': 'v1' };
const transport = new DefaultChatTransport({
  api: 'http://fiduciary.invalid/api/chat',
  fetch: async () => new Response(body, { headers }),
});
const stream = await transport.sendMessages({
  chatId: 'replayed',
  messages: [],
  trigger: 'submit-message',
  messageId: undefined,
  abortSignal: undefined,
});
let last;
for await (const snapshot of readUIMessageStream({ stream, terminateOnError: true })) {
  last = snapshot;
}
console.log(JSON.stringify(last));
