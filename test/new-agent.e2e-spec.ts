import { execFileSync } from 'child_process';
import { randomBytes } from 'crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import {
  agentTypeOf,
  AppProcess,
  client,
  RunningSystem,
  startEmbedded,
  startSystem,
} from './system';
const { root, transpile } = require('../scripts/transpile');
const { stopAll, waitFor, signJwt } = require('../scripts/lib/processes');

const BUILT_IN = ['contract-law', 'labor-law', 'legal-research'];

/**
 * `npm run new:agent` scaffolds an agent that type-checks, registers, and is routed in the next turn.
 * Agents a user scaffolded into apps/ run beside it: the test waits for agents by type, never by count.
 */
describe('system: an agent added with new:agent answers without any orchestrator change', () => {
  const name = `ztax${randomBytes(3).toString('hex')}`;
  const keyword = `${name}filing`;
  // Inside the repo (gitignored) so the scaffold resolves node_modules like a real app would.
  mkdirSync(path.join(root, '.loom-data'), { recursive: true });
  const tmp = mkdtempSync(path.join(root, '.loom-data', 'new-agent-'));
  const scaffold = path.join(tmp, `${name}-agent`);
  const outDir = path.join(root, 'dist', 'apps', `${name}-agent`);
  let sys: RunningSystem;
  /** Its source files and its generated test. */
  const generated = () =>
    ['src', 'test'].flatMap((dir) =>
      readdirSync(path.join(scaffold, dir)).map((f) => path.join(scaffold, dir, f)),
    );

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
    // Built as if it lived in apps/<name>-agent, so its @loom/* requires resolve to dist/libs.
    for (const f of readdirSync(path.join(scaffold, 'src'))) {
      if (!f.endsWith('.ts') || !statSync(path.join(scaffold, 'src', f)).isFile()) continue;
      const asIfAt = path.join(root, 'apps', `${name}-agent`, 'src', f);
      const { code } = transpile(readFileSync(path.join(scaffold, 'src', f), 'utf8'), asIfAt);
      mkdirSync(path.join(outDir, 'src'), { recursive: true });
      writeFileSync(path.join(outDir, 'src', f.replace(/\.ts$/, '.js')), code);
    }
    writeFileSync(path.join(outDir, 'main.js'), "require('./src/main.js');\n");
    sys = await startSystem();
  });
  afterAll(async () => {
    await sys?.stop();
    rmSync(tmp, { recursive: true, force: true });
    rmSync(outDir, { recursive: true, force: true });
  });

  it('generates code and a test that type-check against the libraries', () => {
    const files = generated();
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

  it("is written in the repository's style, so npm test's prettier --check passes", () => {
    const files = generated();
    let output = '';
    try {
      // The CLI, as npm test runs it (prettier's API needs ESM support that Jest lacks). Only
      // .prettierignore: the scaffold sits in gitignored .loom-data, which prettier would skip.
      execFileSync(
        process.execPath,
        [
          require.resolve('prettier/bin/prettier.cjs'),
          '--ignore-path',
          '.prettierignore',
          '--check',
          ...files,
        ],
        {
          cwd: root,
          stdio: 'pipe',
        },
      );
    } catch (err) {
      output = String((err as { stderr?: Buffer }).stderr ?? err);
    }
    expect(output).toBe('');
  });

  it('generates a test that passes (jest, as the e2e project runs apps/*/test)', () => {
    // npm test's e2e project, pointed at the scaffold's test (it sits outside apps/ here).
    const e2e = require('../jest.config.js').projects.find(
      (p: { displayName: string }) => p.displayName === 'e2e',
    );
    const config = { ...e2e, testMatch: [path.join(scaffold, 'test', '*.e2e-spec.ts')] };
    let output = '';
    try {
      execFileSync(
        process.execPath,
        [
          path.join(require.resolve('jest'), '../../bin/jest.js'),
          '--ci',
          '--config',
          JSON.stringify(config),
        ],
        { cwd: root, stdio: 'pipe' },
      );
    } catch (err) {
      output = String((err as { stderr?: Buffer }).stderr ?? err);
    }
    expect(output).toBe('');
  });

  it('registers itself and gets the matching question in the next turn', async () => {
    sys.start(`${name}-agent`);
    await sys.ready([name]);

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
    // Named by the role derived from its name (not its description), and its notes shared.
    expect(turn.body.reply.content).toContain(`[Ztax${name.slice(4)} specialist]`);
    const task = await alice('GET', `/v1/tasks/${turn.body.taskId}`);
    expect(task.body.sharedContext[`${name}.notes`].writer).toBe(name);
    const labor = await alice('POST', `/v1/conversations/${id}/messages`, {
      content: '公司辞退我不给经济补偿',
    });
    expect(labor.body.reply.agentType).toBe('labor-law');
  });

  it('runs in the embedded profile too (only Node), beside the built-in agents', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'loom-new-agent-embedded-'));
    const secret = randomBytes(24).toString('hex');
    const { child, base } = await startEmbedded(dataDir, secret);
    const children: AppProcess[] = [child];
    try {
      const api = client(base, signJwt({ sub: 'alice', tid: 'tenant-e' }, secret));
      // The built-in agents, this one, and any other agent in apps/ (the embedded process starts them all).
      const inApps = readdirSync(path.join(root, 'apps'))
        .filter((app) => existsSync(path.join(root, 'apps', app, 'src', 'agent.ts')))
        .map((app) => agentTypeOf(app) ?? app);
      const expected = [...new Set([...BUILT_IN, ...inApps, name])];
      const types = async (): Promise<string[]> =>
        ((await api('GET', '/v1/agents')).body?.items ?? []).map(
          (a: { agentType: string }) => a.agentType,
        );
      await waitFor(async () => (await types()).includes(name), {
        what: `${name} in the embedded process`,
        timeoutMs: 60_000,
      });
      expect(await types()).toEqual(expect.arrayContaining(expected));
      const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
      const turn = await api('POST', `/v1/conversations/${id}/messages`, {
        content: `I need help with ${keyword} this year`,
      });
      expect(turn.status).toBe(201);
      expect(turn.body.reply.agentType).toBe(name);
    } finally {
      await stopAll(children);
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
