import { parseLegacySession } from './legacy-document';

describe('parseLegacySession', () => {
  it('reads memory.messages with string or block content and keeps other state', () => {
    const doc = {
      agent: { name: 'Assistant', iteration: 5 },
      memory: {
        messages: [
          { role: 'user', content: 'Hello' },
          {
            role: 'ASSISTANT',
            content: [
              { type: 'text', text: 'Hi!' },
              { type: 'image', url: 'x' },
            ],
          },
          { role: 'tool', content: 'ignored' },
          { role: 'user', content: [] },
        ],
      },
    };
    const parsed = parseLegacySession(JSON.stringify(doc));
    expect(parsed.messages).toEqual([
      { role: 'user', content: 'Hello' },
      { role: 'assistant', content: 'Hi!' },
    ]);
    expect(parsed.skipped.map((s) => s.index)).toEqual([2, 3]);
    expect(parsed.state).toEqual({ agent: { name: 'Assistant', iteration: 5 } });
  });

  it('skips roles named like Object members instead of importing them', () => {
    const roles = ['constructor', 'toString', '__proto__', 'hasOwnProperty'];
    const doc = { memory: { messages: roles.map((role) => ({ role, content: 'x' })) } };
    const parsed = parseLegacySession(JSON.stringify(doc));
    expect(parsed.messages).toEqual([]);
    expect(parsed.skipped).toEqual(
      roles.map((role, index) => ({
        index,
        reason: `role ${JSON.stringify(role)} is not user or assistant`,
        message: { role, content: 'x' },
      })),
    );
  });

  it('rejects what is not the old format', () => {
    expect(() => parseLegacySession('{')).toThrow('not valid JSON');
    expect(() => parseLegacySession('[]')).toThrow('not a JSON object');
    expect(() => parseLegacySession('{"memory":{}}')).toThrow('memory.messages');
  });
});

/**
 * GET …/messages bounds the memory of the pages it reads at once by counting messages
 * (LOOM_MAX_MESSAGES_READ_IN_FLIGHT): that is a bound on bytes only while no stored message is
 * longer than the longest the API stores (an agent's answer, 100,000 characters). A legacy message
 * of up to 1,000,000 made one page of 200 up to 200 million characters.
 */
describe('parseLegacySession message size', () => {
  const doc = (chars: number) =>
    JSON.stringify({ memory: { messages: [{ role: 'assistant', content: 'x'.repeat(chars) }] } });

  it('takes a message as long as the longest answer the API stores', () => {
    expect(parseLegacySession(doc(100_000)).messages[0].content.length).toBe(100_000);
  });

  it('refuses a longer one, naming the limit', () => {
    expect(() => parseLegacySession(doc(100_001))).toThrow('over 100000 characters');
  });
});
