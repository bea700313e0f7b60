import { ExecutionContext } from '@nestjs/common';
import { LoomError } from '@loom/session';
import { bearerToken } from '../auth/bearer-token';
import { MetricsTokenGuard } from './metrics-token.guard';

const TOKEN = 'scrape-token-0123456789';

/** A request context with these headers, as Nest hands a guard. */
const withHeaders = (headers: Record<string, unknown>) =>
  ({ switchToHttp: () => ({ getRequest: () => ({ headers }) }) }) as unknown as ExecutionContext;

/** What the guard throws, as its code and message; null when it lets the request through. */
const refusal = (guard: MetricsTokenGuard, authorization?: unknown) => {
  try {
    guard.canActivate(withHeaders({ authorization }));
    return null;
  } catch (err) {
    return LoomError.is(err) ? [err.code, err.message] : err;
  }
};

describe('MetricsTokenGuard', () => {
  it('lets every request through while LOOM_METRICS_TOKEN is unset', () => {
    expect(refusal(new MetricsTokenGuard(null))).toBeNull();
    expect(refusal(new MetricsTokenGuard(null), 'Bearer anything')).toBeNull();
  });

  it('wants the token itself, as a bearer token in any case of the scheme', () => {
    const guard = new MetricsTokenGuard(TOKEN);
    expect(refusal(guard, `Bearer ${TOKEN}`)).toBeNull();
    expect(refusal(guard, `bearer  ${TOKEN} `)).toBeNull();
    expect(refusal(guard)).toEqual(['UNAUTHENTICATED', 'missing bearer token']);
    expect(refusal(guard, TOKEN)).toEqual(['UNAUTHENTICATED', 'missing bearer token']);
    expect(refusal(guard, 'Bearer ')).toEqual(['UNAUTHENTICATED', 'missing bearer token']);
    for (const wrong of [`${TOKEN}x`, TOKEN.slice(0, -1), TOKEN.toUpperCase()])
      expect(refusal(guard, `Bearer ${wrong}`)).toEqual([
        'UNAUTHENTICATED',
        'invalid metrics token',
      ]);
  });
});

describe('bearerToken', () => {
  it('reads the token of a Bearer header only', () => {
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('Basic abc')).toBeNull();
    expect(bearerToken(['Bearer abc'])).toBeNull();
    expect(bearerToken(undefined)).toBeNull();
  });
});
