/** A MariaDB server of a suite's own, which it may stop and start (never the shared one on 3306). */
import { ChildProcess, execFile, spawn } from 'child_process';
import { once } from 'events';
import { mkdtemp, rm } from 'fs/promises';
import { tmpdir } from 'os';
import { join } from 'path';
import { promisify } from 'util';
import { createConnection } from 'mysql2/promise';
import { freePort, sleep } from './private-redis';

const run = promisify(execFile);

/** The first of `names` on PATH (Debian ships both the mariadb-* and the mysql* names). */
async function binary(...names: string[]): Promise<string> {
  for (const name of names) {
    const found = await run('sh', ['-c', `command -v ${name}`]).then(
      (r) => r.stdout.trim(),
      () => '',
    );
    if (found) return found;
  }
  throw new Error(`none of ${names.join(', ')} is installed`);
}

/**
 * `mariadb-install-db` into a temporary directory, then `mariadbd` on a free port of 127.0.0.1
 * (root, no password). `stop()` ends it (SIGTERM or SIGKILL), `restart()` starts it again on the
 * same port and data, `destroy()` removes everything.
 */
export class PrivateMariaDb {
  private child: ChildProcess | null = null;

  private constructor(
    readonly port: number,
    private readonly dir: string,
    private readonly server: string,
    private readonly serverArgs: string[],
  ) {}

  /** `serverArgs`: more mariadbd options (`--ssl-cert=…`, `--default-time-zone=+05:00`). */
  static async start(serverArgs: string[] = []): Promise<PrivateMariaDb> {
    const dir = await mkdtemp(join(tmpdir(), 'loom-mariadb-'));
    const install = await binary('mariadb-install-db', 'mysql_install_db');
    await run(install, [
      '--no-defaults',
      `--datadir=${join(dir, 'data')}`,
      '--auth-root-authentication-method=normal',
      '--skip-test-db',
    ]);
    const db = new PrivateMariaDb(
      await freePort(),
      dir,
      await binary('mariadbd', 'mysqld'),
      serverArgs,
    );
    await db.restart();
    return db;
  }

  /** Server URL without a database, e.g. `mysql://root@127.0.0.1:41234`. */
  get url(): string {
    return `mysql://root@127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== null;
  }

  /** Starts the server and waits until it answers a query (at most 30 s). */
  async restart(): Promise<void> {
    if (this.child) throw new Error('the private mariadbd is already running');
    const child = spawn(
      this.server,
      [
        '--no-defaults',
        `--datadir=${join(this.dir, 'data')}`,
        `--port=${this.port}`,
        `--socket=${join(this.dir, 'sock')}`,
        `--pid-file=${join(this.dir, 'pid')}`,
        '--bind-address=127.0.0.1',
        '--skip-networking=0',
        '--user=root',
        '--skip-log-bin',
        '--innodb-buffer-pool-size=64M',
        ...this.serverArgs,
      ],
      { stdio: 'ignore' },
    );
    child.on('exit', () => {
      if (this.child === child) this.child = null;
    });
    this.child = child;
    for (const deadline = Date.now() + 30_000; ;) {
      if (await this.answers()) return;
      if (Date.now() > deadline || child.exitCode !== null || child.signalCode !== null)
        throw new Error(`mariadbd did not start on port ${this.port}`);
      await sleep(100);
    }
  }

  /** Ends the server (SIGKILL: as a crash; SIGTERM: a clean shutdown) and waits until it is gone. */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGKILL'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill(signal);
    await exited;
  }

  /** SIGSTOP: the server keeps its connections and accepts new ones, and answers nothing. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  /** SIGCONT after `pause()`. */
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  async destroy(): Promise<void> {
    this.resume();
    await this.stop('SIGKILL');
    await rm(this.dir, { recursive: true, force: true });
  }

  private async answers(): Promise<boolean> {
    try {
      const conn = await createConnection({ uri: this.url, connectTimeout: 1000 });
      await conn.query('SELECT 1');
      await conn.end();
      return true;
    } catch {
      return false;
    }
  }
}
