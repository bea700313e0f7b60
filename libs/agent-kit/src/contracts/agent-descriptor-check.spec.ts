import { spawnSync } from 'child_process';
import { existsSync, mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import { bootstrapAgent, runAgent } from '../runtime/bootstrap-agent';
import { descriptorProblem } from './agent-descriptor-check';

const good = {
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords: ['个税', 'income tax'],
};

/** An agent may be any program: its descriptor is checked before it is used. */
describe('descriptorProblem', () => {
  it('accepts a well-formed descriptor, an empty keyword list included', () => {
    expect(descriptorProblem(good)).toBeNull();
    expect(descriptorProblem({ ...good, role: 'research', keywords: [] })).toBeNull();
  });

  it.each([
    ['no intents', { ...good, intents: undefined }, 'intents'],
    ['keywords not a list', { ...good, keywords: 'tax' }, 'keywords'],
    ['a keyword of 101 characters', { ...good, keywords: ['k'.repeat(101)] }, 'keywords'],
    [
      '201 keywords',
      { ...good, keywords: Array.from({ length: 201 }, (_, i) => `k${i}`) },
      'keywords',
    ],
    ['an empty description', { ...good, description: ' ' }, 'description'],
    [
      'a description of 1,001 characters',
      { ...good, description: 'd'.repeat(1001) },
      'description',
    ],
    ['an unknown role', { ...good, role: 'boss' }, 'role'],
    ['upper case in its type', { ...good, agentType: 'Tax_Law' }, 'agentType'],
    ['a type a key would split', { ...good, agentType: 'tax}:law' }, 'agentType'],
    ['null', null, 'not an object'],
  ])('refuses %s', (_, descriptor, field) => {
    expect(descriptorProblem(descriptor)).toContain(field);
  });

  it('keeps an agent with a malformed descriptor from starting, saying what is wrong', async () => {
    await expect(
      bootstrapAgent({ ...good, intents: undefined } as never, class {} as never),
    ).rejects.toThrow("the agent's descriptor is invalid: intents:");
  });

  it("an agent app's runAgent prints one line saying why it did not start, and exits 1", async () => {
    const exited = new Promise<unknown>((resolve) =>
      jest.spyOn(process, 'exit').mockImplementation((code) => resolve(code) as never),
    );
    const written: string[] = [];
    jest.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      written.push(String(chunk));
      return true;
    });
    try {
      runAgent({
        descriptor: { ...good, intents: undefined } as never,
        handler: class {} as never,
      });
      expect(await exited).toBe(1);
      expect(written).toEqual([
        "loom tax-law agent: failed to start: the agent's descriptor is invalid: " +
          `${descriptorProblem({ ...good, intents: undefined })}\n`,
      ]);
    } finally {
      jest.restoreAllMocks();
    }
  });

  it.each([
    ['--description', 'd'.repeat(1001), '--description is at most 1000 characters'],
    ['--keywords', `tax,${'k'.repeat(101)}`, '--keywords: a keyword is at most 100 characters'],
  ])(
    'new:agent refuses a %s the kit would not start with, writing nothing',
    (flag, value, says) => {
      const tmp = mkdtempSync(path.join(tmpdir(), 'new-agent-'));
      const dir = path.join(tmp, 'tax-law-agent');
      const script = path.join(__dirname, '../../../../scripts/new-agent.js');
      const run = spawnSync(process.execPath, [script, 'tax-law', flag, value, '--dir', dir], {
        encoding: 'utf8',
      });
      rmSync(tmp, { recursive: true, force: true });
      expect({ status: run.status, stderr: run.stderr.trim() }).toEqual({
        status: 2,
        stderr: `new:agent: ${says}`,
      });
      expect(existsSync(dir)).toBe(false);
    },
  );
});
