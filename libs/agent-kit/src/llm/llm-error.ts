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

/** The statuses of a provider that is there but will not answer now. */
const BUSY_STATUSES = new Set([429, 503, 529]);

/**
 * An error event in the stream of a 200 (`data: {"error": {"code": 429, …}}`, as OpenRouter and
 * vLLM report a failure once the answer started) whose code is a busy status: that failure as
 * an LlmError, as the same status answered before the stream would be; undefined for any other.
 */
export function streamedFailure(
  purpose: string,
  error: unknown,
  secrets: readonly string[],
): LlmError | undefined {
  // The SDK throws an error event as an APIError without a status (the stream's was 200).
  if (!(error instanceof Error)) return undefined;
  const e = error as Error & { status?: unknown; code?: unknown };
  if (e.status !== undefined) return undefined;
  const code = typeof e.code === 'string' && /^\d{3}$/.test(e.code) ? Number(e.code) : e.code;
  if (typeof code !== 'number' || !BUSY_STATUSES.has(code)) return undefined;
  const failure = Object.assign(new Error(String(e.message ?? '')), {
    name: error.name,
    status: code,
  });
  return toLlmError(purpose, failure, secrets);
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
