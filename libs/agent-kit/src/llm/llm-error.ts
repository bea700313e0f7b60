import { LlmError } from './llm.types';

const REDACTIONS: Array<[RegExp, string]> = [
  [/(api[ _-]?key[^:]{0,20}:\s*)\S+/gi, '$1***'],
  [/\bsk-[\w*.-]{4,}/g, 'sk-***'],
  [/(Bearer\s+)\S+/gi, '$1***'],
];

/** `text` with the given secrets and anything that looks like an API key masked. */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  let safe = text;
  for (const secret of secrets) if (secret) safe = safe.split(secret).join('***');
  for (const [pattern, replacement] of REDACTIONS) safe = safe.replace(pattern, replacement);
  return safe;
}

/** A provider failure as an LlmError that names the purpose and HTTP status but no credential. */
export function toLlmError(purpose: string, error: unknown, secrets: readonly string[]): LlmError {
  const status = (error as { status?: unknown } | null)?.status;
  const httpStatus = typeof status === 'number' ? status : undefined;
  const raw = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const detail = redactSecrets(raw, secrets);
  const statusText = httpStatus ? ` (HTTP ${httpStatus})` : '';
  const meaning = httpStatus ? meaningOf(httpStatus, raw) : undefined;
  const failure = new LlmError(
    `LLM ${purpose} request failed${statusText}: ${detail}`,
    httpStatus,
    meaning && `${meaning}${statusText}`,
  );
  failure.busy = httpStatus !== undefined && busy(httpStatus, error, raw);
  return failure;
}

/**
 * The provider is there but will not answer now (rate limited, overloaded), after Loom's own
 * retries: worth a retry later. A 429 for a quota that is used up is not: no retry helps.
 */
function busy(status: number, error: unknown, raw: string): boolean {
  if (status === 503 || status === 529) return true;
  if (status !== 429) return false;
  const code = (error as { code?: unknown } | null)?.code;
  return (
    code !== 'insufficient_quota' && !/insufficient_quota|exceeded your current quota/i.test(raw)
  );
}

/**
 * What a status means for whoever runs Loom, in Loom's words (the provider's may quote the key
 * or the prompt); undefined: the generic `the model call failed`.
 */
function meaningOf(status: number, raw: string): string | undefined {
  if (status === 401 || status === 403) return "the model endpoint refused Loom's API key";
  if (status === 429 && /insufficient_quota|exceeded your current quota/i.test(raw))
    return "the model endpoint's quota for Loom's key is used up";
  if (status === 429 || status === 503 || status === 529)
    return 'the model endpoint is busy (rate limited or overloaded): retry later';
  if (status === 404)
    return 'the model endpoint has no such model or path (LLM_MODEL, OPENAI_BASE_URL)';
  if (status === 400 && /context[ _](length|window)|maximum context|too many tokens/i.test(raw))
    return "the prompt is longer than the model's context";
  return undefined;
}
