import { spawnSync } from 'child_process';
import { existsSync, mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run new:agent agent` would generate `class AgentHandler implements AgentHandler`, its own
 * name shadowing the agent kit's interface it imports: an app that fails the type-check the
 * scaffold promises to pass. The name is refused in one line instead, and nothing is written.
 */
describe('system: npm run new:agent with a name its code cannot hold', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-new-agent-name-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('refuses "agent", writing nothing', () => {
    const dir = join(tmp, 'agent-agent');
    const out = spawnSync(
      process.execPath,
      [join(root, 'scripts', 'new-agent.js'), 'agent', '--dir', dir],
      { encoding: 'utf8' },
    );
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('new:agent: invalid name "agent"');
    expect(existsSync(dir)).toBe(false);
  });
});

/**
 * npm takes the options given before `--` as its own: `npm run new:agent vat --keywords=vat,增值税`
 * reached new:agent as `vat` alone, and scaffolded an agent routed on "vat" only, without a word.
 * npm leaves them in the environment (npm_config_keywords), so they are refused, saying where
 * they go.
 */
describe('system: npm run new:agent with its options before --', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-new-agent-npm-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('refuses them in one line, writing nothing', () => {
    const dir = join(tmp, 'vat-agent');
    const out = spawnSync(
      'npm',
      ['run', '-s', 'new:agent', 'vat', '--keywords=vat,增值税', '--', '--dir', dir],
      { cwd: root, encoding: 'utf8' },
    );
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('new:agent: npm took --keywords as its own');
    expect(existsSync(dir)).toBe(false);
  });
});
