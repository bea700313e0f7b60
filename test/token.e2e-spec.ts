import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/** `npm run token` as a process: it refuses what the orchestrator would answer 401 to. */
describe('system: npm run token', () => {
  const token = (...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', 'token.js'), ...args], {
      env: { ...process.env, LOOM_JWT_SECRET: 'token-test-secret-0123456789' },
      encoding: 'utf8',
    });

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
  ])('refuses %j in one line, printing no token', (args, message) => {
    const out = token(...args);
    expect(out.status).toBe(2);
    expect(out.stdout).toBe('');
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain(message);
  });
});
