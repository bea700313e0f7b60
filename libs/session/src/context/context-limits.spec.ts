import { MAX_MEMORY_JSON_CHARS, privateStateProblem } from './context-limits';

describe('privateStateProblem (an agent session as its handler left it)', () => {
  const fine = { localMemory: { a: 1 }, messages: [], toolCalls: [] };

  it('passes private state within its limits', () => {
    expect(privateStateProblem(fine)).toBeNull();
  });

  it('names each part that is the wrong shape, over its limit or not JSON', () => {
    expect(privateStateProblem({ ...fine, localMemory: [] })).toEqual({
      message: 'private memory that is not an object',
      parts: ['localMemory'],
    });
    expect(privateStateProblem({ ...fine, messages: null })?.parts).toEqual(['messages']);
    expect(privateStateProblem({ ...fine, toolCalls: [{ n: BigInt(1) }] })?.message).toBe(
      'tool calls that cannot be stored as JSON (a BigInt, or an object that contains itself)',
    );
    const big = { ...fine, localMemory: { m: 'm'.repeat(MAX_MEMORY_JSON_CHARS) } };
    expect(privateStateProblem(big)?.message).toBe(
      `private memory of ${MAX_MEMORY_JSON_CHARS + 8} characters of JSON, over the limit of ${MAX_MEMORY_JSON_CHARS}`,
    );
  });
});
