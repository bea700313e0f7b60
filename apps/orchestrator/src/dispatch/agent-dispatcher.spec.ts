import { MAX_ERROR_MESSAGE_CHARS } from '@loom/agent-kit';
import { asLoomError } from './agent-dispatcher';

/** An agent's error (any program's) as the orchestrator stores and answers it. */
describe('asLoomError', () => {
  it("cuts every message an agent sends, a busy model's included", () => {
    const long = 'x'.repeat(50_000);
    for (const err of [
      { code: 'AGENT_FAILED', message: long },
      { code: 'UNAVAILABLE', modelSaid: true, message: long },
    ]) {
      const e = asLoomError(err, 'tax-law');
      expect(e.code).toBe(err.code);
      expect(e.message.length).toBeLessThanOrEqual(MAX_ERROR_MESSAGE_CHARS);
    }
  });

  it("answers a busy model's message that is not text as the agent being unavailable", () => {
    const e = asLoomError({ code: 'UNAVAILABLE', modelSaid: true, message: { a: 1 } }, 'tax-law');
    expect([e.code, e.message]).toEqual(['UNAVAILABLE', 'tax-law is unavailable']);
  });

  it("keeps a busy model's own words and what they cost", () => {
    const usage = { promptTokens: 3, completionTokens: 0, costUsd: 0 };
    const message =
      'the model endpoint is busy (rate limited or overloaded): retry later (HTTP 429)';
    const e = asLoomError({ code: 'UNAVAILABLE', modelSaid: true, message, usage }, 'tax-law');
    expect([e.code, e.message, e.details]).toEqual(['UNAVAILABLE', message, { usage }]);
  });
});
