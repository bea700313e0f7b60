import { execFileSync } from 'child_process';
import { randomBytes } from 'crypto';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'fs';
import * as path from 'path';
import { client, RunningSystem, startSystem } from './system';
const { root, transpile } = require('../scripts/transpile');

/** `npm run new:agent` scaffolds an agent that type-checks, registers, and is routed in the next turn. */
describe('system: an agent added with new:agent answers without any orchestrator change', () => {
  const name = `ztax${randomBytes(3).toString('hex')}`;
  const keyword = `${name}filing`;
  // Inside the repo (gitignored) so the scaffold resolves node_modules like a real app would.
  mkdirSync(path.join(root, '.loom-data'), { recursive: true });
  const tmp = mkdtempSync(path.join(root, '.loom-data', 'new-agent-'));
  const scaffold = path.join(tmp, `${name}-agent`);
  const outDir = path.join(root, 'dist', 'apps', `${name}-agent`);
  let sys: RunningSystem;

  beforeAll(async () => {
    execFileSync(process.execPath, [
      path.join(root, 'scripts', 'new-agent.js'),
      name,
      '--keywords',
      keyword,
      '--description',
      'Tax specialist',
      '--dir',
      scaffold,
    ]);
    sys = await startSystem();
  });
  afterAll(async () => {
    await sys?.stop();
    rmSync(tmp, { recursive: true, force: true });
    rmSync(outDir, { recursive: true, force: true });
  });

  it('generates code that type-checks against the libraries', () => {
    const files = readdirSync(path.join(scaffold, 'src')).map((f) => path.join(scaffold, 'src', f));
    const tsconfig = path.join(scaffold, 'tsconfig.check.json');
    writeFileSync(
      tsconfig,
      JSON.stringify({
        extends: path.join(root, 'tsconfig.json'),
        compilerOptions: { noEmit: true, incremental: false },
        include: [],
        files,
      }),
    );
    let output = '';
    try {
      execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', tsconfig], {
        stdio: 'pipe',
      });
    } catch (err) {
      output = String((err as { stdout?: Buffer }).stdout ?? err);
    }
    expect(output).toBe('');
  });

  it('registers itself and gets the matching question in the next turn', async () => {
    // Built as if it lived in apps/<name>-agent, so its @loom/* requires resolve to dist/libs.
    for (const f of readdirSync(path.join(scaffold, 'src'))) {
      if (!f.endsWith('.ts') || !statSync(path.join(scaffold, 'src', f)).isFile()) continue;
      const asIfAt = path.join(root, 'apps', `${name}-agent`, 'src', f);
      const { code } = transpile(readFileSync(path.join(scaffold, 'src', f), 'utf8'), asIfAt);
      mkdirSync(path.join(outDir, 'src'), { recursive: true });
      writeFileSync(path.join(outDir, 'src', f.replace(/\.ts$/, '.js')), code);
    }
    writeFileSync(path.join(outDir, 'main.js'), "require('./src/main.js');\n");
    sys.start(`${name}-agent`);
    await sys.ready(4);

    const alice = client(sys.base, sys.token('tenant-a', 'alice'));
    const agents = await alice('GET', '/v1/agents');
    expect(agents.body.items).toContainEqual({
      agentType: name,
      description: 'Tax specialist',
      instances: 1,
    });
    const id = (await alice('POST', '/v1/conversations', {})).body.conversationId;
    const turn = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: `I need help with ${keyword} this year`,
    });
    expect(turn.status).toBe(201);
    expect(turn.body.reply.agentType).toBe(name);
    expect(turn.body.agents).toContain(name);
    const labor = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '公司辞退我不给经济补偿',
    });
    expect(labor.body.reply.agentType).toBe('labor-law');
  });
});
