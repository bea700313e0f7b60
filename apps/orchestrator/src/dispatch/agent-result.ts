import { ExecuteAgentResult, MAX_ANSWER_CHARS } from '@loom/agent-kit';
import { ContextReport, LoomError, LoomErrorCode } from '@loom/session';

/**
 * An agent's result as the orchestrator keeps it. An agent is another program, written by
 * someone else: its answer must be text, not blank and at most MAX_ANSWER_CHARS, else the
 * execution fails (AGENT_FAILED, naming what was wrong) rather than a non-text reply being
 * stored, which every later turn of the conversation would then trip over. What it says it was
 * shown (`context`) is kept only as far as it has the documented shape.
 */
export function checkedResult(result: unknown, agentType: string): ExecuteAgentResult {
  const r = (typeof result === 'object' && result !== null ? result : {}) as Record<
    string,
    unknown
  >;
  const refuse = (what: string) =>
    new LoomError(LoomErrorCode.AGENT_FAILED, `${agentType} sent ${what}`);
  if (typeof r.output !== 'string') throw refuse(`an answer that is not text (${kind(r.output)})`);
  if (r.output.trim() === '') throw refuse('an empty answer');
  if (r.output.length > MAX_ANSWER_CHARS)
    throw refuse(`an answer over ${MAX_ANSWER_CHARS} characters (${r.output.length})`);
  return {
    ...(r as unknown as ExecuteAgentResult),
    context: reportedContext(r.context),
    replayed: r.replayed === true,
  };
}

const MAX_CONTEXT_KEYS = 100;

/** What an execution reports it was shown, when it is that shape; else nothing shown. */
function reportedContext(c: unknown): ContextReport {
  const { historyMessages, summaryIncluded, sharedKeys } = (c ?? {}) as Partial<ContextReport>;
  return {
    historyMessages:
      Number.isSafeInteger(historyMessages) && (historyMessages as number) >= 0
        ? (historyMessages as number)
        : 0,
    summaryIncluded: summaryIncluded === true,
    sharedKeys: Array.isArray(sharedKeys)
      ? sharedKeys
          .filter((k): k is string => typeof k === 'string' && k.length <= 256)
          .slice(0, MAX_CONTEXT_KEYS)
      : [],
  };
}

function kind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value;
}
