/**
 * ioredis failures that mean "Redis did not answer in time or is not connected", not "this
 * command is wrong": a command time-out, a closed or not-yet-ready connection with no offline
 * queue, the per-request retry limit.
 */
const UNAVAILABLE_MESSAGES = [
  /^Command timed out$/,
  /^Connection is closed\.$/,
  /^Stream isn't writeable and enableOfflineQueue options is false$/,
  /^Reached the max retries per request limit/,
];

export function isRedisUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  if (err.name === 'MaxRetriesPerRequestError') return true;
  return UNAVAILABLE_MESSAGES.some((re) => re.test(err.message));
}
