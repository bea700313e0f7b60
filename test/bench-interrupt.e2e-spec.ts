import { ChildProcess, execFileSync, spawn } from 'child_process';
import { once } from 'events';
import { readFileSync } from 'fs';
import { join } from 'path';
import { createConnection } from 'mysql2/promise';
import { TEST_MYSQL_URL } from '@loom/testing';
const { root, waitFor } = require('../scripts/lib/processes');

/** pid → [ppid, command name] of every process. */
function processTable(): Map<number, [number, string]> {
  const out = execFileSync('ps', ['-eo', 'pid=,ppid=,comm='], { encoding: 'utf8' });
  const table = new Map<number, [number, string]>();
  for (const line of out.trim().split('\n')) {
    const [pid, ppid, comm] = line.trim().split(/\s+/);
    table.set(Number(pid), [Number(ppid), comm]);
  }
  return table;
}

function descendants(pid: number): Map<number, string> {
  const table = processTable();
  const found = new Map<number, string>();
  let grew = true;
  while (grew) {
    grew = false;
    for (const [p, [ppid, comm]] of table)
      if ((ppid === pid || found.has(ppid)) && !found.has(p)) {
        found.set(p, comm);
        grew = true;
      }
  }
  return found;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** The database an app of the benchmark was given (its MYSQL_URL). */
function benchDatabase(pids: number[]): string | undefined {
  for (const pid of pids) {
    try {
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      const url = env.find((e) => e.startsWith('MYSQL_URL='));
      if (url) return new URL(url.slice('MYSQL_URL='.length)).pathname.slice(1);
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

/**
 * `npm run bench -- turn` stopped while it runs (SIGTERM, a Ctrl-C's SIGINT sent to it alone, or
 * the process that started it killed outright) takes what it started with it: its private
 * redis-server, the apps and the benchmark's database. Before, its redis-server ran on for good.
 */
describe('system: npm run bench interrupted', () => {
  const started: ChildProcess[] = [];
  afterAll(async () => {
    for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  });

  /** Starts the turn benchmark (through `parent` when given) and waits for its apps. */
  async function startBench(throughParent: boolean) {
    const bench = [join(root, 'scripts', 'bench.js'), 'turn'];
    // A parent that starts the benchmark and would be killed outright (npm, a CI job's shell).
    const args = throughParent
      ? [
          '-e',
          `require('child_process').spawn(process.execPath, ${JSON.stringify(bench)}, { stdio: 'ignore' }); setInterval(() => {}, 1000);`,
        ]
      : bench;
    const child = spawn(process.execPath, args, { cwd: root, stdio: 'ignore', detached: true });
    started.push(child);
    // Up once the apps (node processes under dist/apps) and a redis-server run under it.
    const tree = await waitFor(
      () => {
        const d = descendants(child.pid!);
        const names = [...d.values()];
        const apps = [...d.keys()].filter((p) => benchDatabase([p]) !== undefined);
        return names.includes('redis-server') && apps.length >= 4 ? d : null;
      },
      { what: 'the benchmark to start its redis-server and apps', timeoutMs: 100_000 },
    );
    return { child, tree: tree as Map<number, string> };
  }

  async function expectAllGone(tree: Map<number, string>, database: string) {
    const left = () => [...tree].filter(([pid]) => alive(pid));
    await waitFor(async () => left().length === 0, {
      what: 'every process of the benchmark to end',
      timeoutMs: 30_000,
    }).catch(() => undefined);
    expect(left()).toEqual([]);
    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query('SHOW DATABASES LIKE ?', [database]);
      expect(rows).toEqual([]);
    } finally {
      await conn.query(`DROP DATABASE IF EXISTS \`${database}\``);
      await conn.end();
    }
  }

  it.each(['SIGTERM', 'SIGINT'] as const)(
    'on %s removes its redis-server, apps and database',
    async (signal) => {
      const { child, tree } = await startBench(false);
      const database = benchDatabase([...tree.keys()])!;
      const exited = once(child, 'exit');
      child.kill(signal);
      await exited;
      await expectAllGone(tree, database);
    },
  );

  it('when the process that started it is killed, removes them too', async () => {
    const { child, tree } = await startBench(true);
    const database = benchDatabase([...tree.keys()])!;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
    await expectAllGone(tree, database);
  });
});
