import { spawnSync } from 'child_process';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/** `npm run start:all`'s arguments: it takes none, so it starts nothing it was not asked for. */
describe('system: npm run start:all arguments', () => {
  const startAll = (...args: string[]) =>
    spawnSync(process.execPath, [join(root, 'scripts', 'start-all.js'), ...args], {
      encoding: 'utf8',
      timeout: 30_000,
    });

  it('--help prints its usage and starts nothing', () => {
    const out = startAll('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run start:all');
    expect(out.stdout).not.toContain('listening');
  });

  it.each([['--port', '4000'], ['orchestrator']])(
    'refuses %j in one line, exit 2, starting nothing',
    (...args) => {
      const out = startAll(...args);
      expect(out.status).toBe(2);
      expect(out.stdout).toBe('');
      expect(out.stderr.trim().split('\n')).toHaveLength(2);
      expect(out.stderr).toContain(`unknown argument: ${args[0]}`);
      expect(out.stderr).toContain('usage: npm run start:all');
    },
  );
});
