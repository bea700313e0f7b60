import { parseEnv } from './loom-env';

describe('parseEnv: security settings', () => {
  const secrets = { LOOM_JWT_SECRET: 'x'.repeat(32), LOOM_AGENT_SECRET: 'y'.repeat(32) };

  it('defaults: no ACL rules, stored text kept, 600 requests per tenant per minute', () => {
    const env = parseEnv(secrets);
    expect(env.sharedAcl).toEqual({});
    expect(env.LOOM_REDACT_STORED).toBe(false);
    expect(env.LOOM_RATE_LIMIT_PER_MINUTE).toBe(600);
    expect(env.LOOM_RATE_LIMIT_WINDOW_MS).toBe(60_000);
  });

  it('parses LOOM_SHARED_ACL and the switches', () => {
    const env = parseEnv({
      ...secrets,
      LOOM_SHARED_ACL: '{"follow-up":{"research.statutes":["labor-law"]}}',
      LOOM_REDACT_STORED: 'true',
      LOOM_RATE_LIMIT_PER_MINUTE: '5',
    });
    expect(env.sharedAcl).toEqual({ 'follow-up': { 'research.statutes': ['labor-law'] } });
    expect(env.LOOM_REDACT_STORED).toBe(true);
    expect(env.LOOM_RATE_LIMIT_PER_MINUTE).toBe(5);
  });

  it('names LOOM_SHARED_ACL when it is not valid JSON or not the right shape', () => {
    expect(() => parseEnv({ ...secrets, LOOM_SHARED_ACL: '{nope' })).toThrow(/LOOM_SHARED_ACL/);
    expect(() => parseEnv({ ...secrets, LOOM_SHARED_ACL: '{"a":{"k":"labor-law"}}' })).toThrow(
      /LOOM_SHARED_ACL: a\.k must list agent types/,
    );
    expect(() => parseEnv({ ...secrets, LOOM_RATE_LIMIT_PER_MINUTE: '-1' })).toThrow(
      /LOOM_RATE_LIMIT_PER_MINUTE/,
    );
  });

  // A rule is matched by exact name: `research.*` protected no key but one literally named so,
  // and `follow-*` no task type, while the deployment believed a family of keys protected.
  it.each([
    '{"*":{"research.*":["legal-research"]}}',
    '{"*":{"*":["legal-research"]}}',
    '{"follow-*":{"verdict":["labor-law"]}}',
  ])('refuses a wildcard the ACL would not honour, naming LOOM_SHARED_ACL: %s', (acl) => {
    expect(() => parseEnv({ ...secrets, LOOM_SHARED_ACL: acl })).toThrow(/LOOM_SHARED_ACL: bad/);
  });

  // A URL with its password, where host:port was wanted (a common slip: REDIS_CLUSTER_NODES set
  // like REDIS_URL), came back quoted whole in the error every main prints on stderr, unredacted.
  it('names a bad REDIS_CLUSTER_NODES or REDIS_CLUSTER_NAT_MAP entry without its password', () => {
    const password = 'Sup3r-Secret_pw';
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ REDIS_CLUSTER_NODES: `redis://default:${password}@redis-a:6379` }, /REDIS_CLUSTER_NODES/],
      [{ REDIS_CLUSTER_NODES: `rediss://:${password}@redis-a:6379,b:1` }, /REDIS_CLUSTER_NODES/],
      [{ REDIS_CLUSTER_NODES: `default:${password}@redis-a:6379` }, /REDIS_CLUSTER_NODES/],
      [
        {
          REDIS_CLUSTER_NODES: 'redis-a:6379',
          REDIS_CLUSTER_NAT_MAP: `10.0.1.5:6379=redis://u:${password}@lb:30001`,
        },
        /REDIS_CLUSTER_NAT_MAP/,
      ],
    ];
    for (const [env, names] of cases) {
      let message = '';
      try {
        parseEnv({ ...secrets, ...env });
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(names);
      expect(message).toContain('@');
      expect(message).not.toContain(password);
    }
  });

  // As with MYSQL_URL: a password with an unencoded "/" after digits or nothing ends the
  // authority early, and on a cluster the rest of it was quoted as REDIS_URL's database.
  it('names no part of a password that ended up as REDIS_URL’s database', () => {
    for (const env of [
      { REDIS_URL: 'redis://default:2024/kP9+qzT@redis-a:6379' },
      { REDIS_URL: 'redis://default:2024/kP9+qzT@redis-a:6379', REDIS_CLUSTER_NODES: 'a:7000' },
    ]) {
      let message = '';
      try {
        parseEnv({ ...secrets, ...env });
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(/REDIS_URL/);
      expect(message).not.toContain('kP9+qzT');
    }
  });
});
