import { spawnSync } from 'child_process';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { parseEnv } from '@loom/agent-kit/config/loom-env';
const { root } = require('../scripts/lib/processes');

/** `npm run token` as a process: it refuses what the orchestrator would answer 401 to. */
describe('system: npm run token', () => {
  const tokenWith = (env: Record<string, string>, ...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', 'token.js'), ...args], {
      env: { ...process.env, LOOM_JWT_SECRET: 'token-test-secret-0123456789', ...env },
      encoding: 'utf8',
    });
  const token = (...args: string[]) => tokenWith({ LOOM_JWT_MAX_AGE_S: '' }, ...args);
  const lifetime = (jwt: string) => {
    const { iat, exp } = JSON.parse(Buffer.from(jwt.split('.')[1], 'base64url').toString());
    return exp - iat;
  };

  it('prints a token for valid ids', () => {
    const out = token('alice', 'acme', '2');
    expect(out.status).toBe(0);
    expect(out.stdout.split('.')).toHaveLength(3);
  });

  it.each([
    [['alice', '_sys'], 'tenant ids starting with _ are reserved'],
    [['alice smith', 'acme'], 'invalid user id'],
    [['alice', 'ac/me'], 'invalid tenant id'],
    [['alice', 'acme', '0'], 'hours must be more than 0'],
    // Flags are no ids: a token for user "--user" of tenant "alice" would be 401 at best.
    [['--user', 'alice'], 'usage: npm run token'],
    [['alice', 'acme', '2', 'extra'], 'usage: npm run token'],
  ])('refuses %j in one line, printing no token', (args, message) => {
    const out = token(...args);
    expect(out.status).toBe(2);
    expect(out.stdout).toBe('');
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain(message);
  });

  it('keeps within LOOM_JWT_MAX_AGE_S, as the orchestrator requires', () => {
    // Without hours: the default hour, shortened to the limit.
    const short = tokenWith({ LOOM_JWT_MAX_AGE_S: '900' }, 'alice', 'acme');
    expect(short.status).toBe(0);
    expect(lifetime(short.stdout.trim())).toBe(900);
    expect(lifetime(tokenWith({ LOOM_JWT_MAX_AGE_S: '0' }, 'alice', 'acme').stdout)).toBe(3600);
    // Hours past the limit: a token the orchestrator would answer 401 is not printed.
    const long = tokenWith({ LOOM_JWT_MAX_AGE_S: '900' }, 'alice', 'acme', '1');
    expect(long.status).toBe(2);
    expect(long.stdout).toBe('');
    expect(long.stderr.trim().split('\n')).toHaveLength(1);
    expect(long.stderr).toContain('LOOM_JWT_MAX_AGE_S');
    // A limit that is no round number of hours is said readably, and the hours said are taken.
    const odd = tokenWith({ LOOM_JWT_MAX_AGE_S: '600' }, 'alice', 'acme', '1');
    expect(odd.stderr).toContain('hours must be at most 0.1666 (');
    const taken = tokenWith({ LOOM_JWT_MAX_AGE_S: '600' }, 'alice', 'acme', '0.1666');
    expect(taken.status).toBe(0);
  });

  it.each([
    '600',
    '600.0',
    ' 600 ',
    '+600',
    '600.',
    '600.5',
    '.5',
    '1e3',
    '0x10',
    '-1',
    '-0',
    '  ',
  ])('reads LOOM_JWT_MAX_AGE_S=%j as the orchestrator does', (value) => {
    const env = { LOOM_JWT_SECRET: 'token-test-secret-0123456789' };
    const appAccepts = (() => {
      try {
        parseEnv({
          ...env,
          LOOM_AGENT_SECRET: 'agent-secret-0123456789',
          LOOM_JWT_MAX_AGE_S: value,
        });
        return true;
      } catch {
        return false;
      }
    })();
    const out = tokenWith({ LOOM_JWT_MAX_AGE_S: value }, 'alice', 'acme', '0.1');
    expect({ value, accepted: out.status === 0 }).toEqual({ value, accepted: appAccepts });
    if (!appAccepts) expect(out.stderr).toContain('LOOM_JWT_MAX_AGE_S');
  });

  it('embedded: without the secret file, names the path it looked at and LOOM_DATA_DIR', () => {
    // `npm run token` runs in the repository root; the embedded app may have been started in
    // another directory, whose .loom-data holds the secret.
    const cwd = mkdtempSync(join(tmpdir(), 'token-no-secret-'));
    try {
      const out = spawnSync(
        process.execPath,
        [join(root, 'scripts', 'token.js'), 'alice', 'acme'],
        {
          cwd,
          env: { ...process.env, LOOM_JWT_SECRET: '', LOOM_DATA_DIR: '', LOOM_PROFILE: 'embedded' },
          encoding: 'utf8',
        },
      );
      expect(out.status).toBe(2);
      expect(out.stdout).toBe('');
      expect(out.stderr.trim().split('\n')).toHaveLength(1);
      expect(out.stderr).toContain(join(cwd, '.loom-data', 'token-secret'));
      expect(out.stderr).toMatch(/another directory.*LOOM_DATA_DIR=/);
    } finally {
      rmSync(cwd, { recursive: true, force: true });
    }
  });
});
