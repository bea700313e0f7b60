import { createHmac } from 'crypto';
import { ExecutionContext } from '@nestjs/common';
import { JwtService } from '@nestjs/jwt';
import { ClsService } from 'nestjs-cls';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import { LoomClsStore } from '@loom/observability';
import { JwtAuthGuard } from './jwt-auth.guard';
import { TokenVerifier } from './token-verifier';

const SECRET = 'a-secret-of-the-unit-test-1234';

/** The guard with a real JwtService, a CLS stand-in that records what it is given, and `env`. */
function guardWith(maxAgeS: number) {
  const env: LoomEnv = parseEnv(
    {
      LOOM_JWT_SECRET: SECRET,
      LOOM_AGENT_SECRET: 'another-secret-of-the-test-5678',
      LOOM_JWT_MAX_AGE_S: String(maxAgeS),
    },
    'orchestrator',
  );
  const jwt = new JwtService({ secret: SECRET, verifyOptions: { algorithms: ['HS256'] } });
  const set: Record<string, unknown> = {};
  const cls = {
    set: (k: string, v: unknown) => (set[k] = v),
  } as unknown as ClsService<LoomClsStore>;
  const guard = new JwtAuthGuard(new TokenVerifier(jwt, env), cls);
  const checkSigned = (signed: string) => {
    const req = { headers: { authorization: `Bearer ${signed}` } };
    const ctx = { switchToHttp: () => ({ getRequest: () => req }) } as unknown as ExecutionContext;
    return guard.canActivate(ctx);
  };
  const check = (claims: Record<string, unknown>, header?: Record<string, unknown>) =>
    checkSigned(jwt.sign(claims, header ? { header: { alg: 'HS256', ...header } } : {}));
  return { check, checkSigned, set };
}

/** An HS256 token of any claims, signed with SECRET without jsonwebtoken's checks of them. */
function handSigned(claims: Record<string, unknown>): string {
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`;
  return `${body}.${createHmac('sha256', SECRET).update(body).digest('base64url')}`;
}

const now = () => Math.floor(Date.now() / 1000);

describe('JwtAuthGuard', () => {
  it('refuses a token with critical extensions and a tenant in the reserved _ namespace', async () => {
    const { check } = guardWith(0);
    await expect(check({ sub: 'alice', tid: 'tenant-a' }, { crit: ['exp'] })).rejects.toMatchObject(
      { code: 'UNAUTHENTICATED' },
    );
    await expect(check({ sub: 'alice', tid: 'tenant-a' }, { kid: 'k1' })).resolves.toBe(true);
    for (const tid of ['_system', '_anything'])
      await expect(check({ sub: 'alice', tid })).rejects.toMatchObject({
        code: 'UNAUTHENTICATED',
        message: 'tenant ids starting with _ are reserved',
      });
    await expect(check({ sub: '_alice', tid: 'tenant_a' })).resolves.toBe(true);
    // A payload that is not an object has no claims.
    await expect(check('alice' as unknown as Record<string, unknown>)).rejects.toMatchObject({
      code: 'UNAUTHENTICATED',
    });
  });
});

describe('JwtAuthGuard and LOOM_JWT_MAX_AGE_S', () => {
  it('accepts a token without exp while no maximum age is set', async () => {
    const { check, set } = guardWith(0);
    await expect(check({ sub: 'alice', tid: 'tenant-a' })).resolves.toBe(true);
    expect(set).toEqual({ tenantId: 'tenant-a', userId: 'alice' });
  });

  it('with a maximum age, refuses a token without exp or expiring later, accepts one within it', async () => {
    const { check } = guardWith(3600);
    await expect(check({ sub: 'alice', tid: 'tenant-a' })).rejects.toMatchObject({
      code: 'UNAUTHENTICATED',
    });
    await expect(check({ sub: 'alice', tid: 'tenant-a', exp: now() + 7200 })).rejects.toMatchObject(
      { code: 'UNAUTHENTICATED' },
    );
    await expect(check({ sub: 'alice', tid: 'tenant-a', exp: now() + 600 })).resolves.toBe(true);
    // a full-length token from an issuer whose clock runs 10 s ahead
    await expect(check({ sub: 'alice', tid: 'tenant-a', exp: now() + 3610 })).resolves.toBe(true);
    await expect(check({ sub: 'alice', tid: 'tenant-a', exp: now() - 10 })).rejects.toMatchObject({
      code: 'UNAUTHENTICATED',
    });
  });
});

describe('JwtAuthGuard and clock skew', () => {
  it('accepts a token issued by a clock up to 30 s ahead of ours, nbf included; refuses one not valid for longer', async () => {
    for (const maxAge of [0, 3600]) {
      const { check, checkSigned } = guardWith(maxAge);
      // an issuer whose clock runs 10 s ahead: iat and nbf are 10 s in our future
      const ahead = now() + 10;
      await expect(
        check({ sub: 'alice', tid: 'tenant-a', iat: ahead, nbf: ahead, exp: ahead + 3600 }),
      ).resolves.toBe(true);
      // not valid for another 2 minutes: no skew explains that
      await expect(
        check({ sub: 'alice', tid: 'tenant-a', nbf: now() + 120, exp: now() + 600 }),
      ).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
      // a malformed nbf voids the token (jsonwebtoken would not sign it: signed by hand)
      await expect(
        checkSigned(handSigned({ sub: 'alice', tid: 'tenant-a', nbf: 'soon', exp: now() + 600 })),
      ).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
    }
  });
});
