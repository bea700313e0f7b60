/** A redis-server of a suite's own, which it may pause, kill and flush (never the shared one). */
import { ChildProcess, spawn } from 'child_process';
import { once } from 'events';
import { createServer } from 'net';
import Redis from 'ioredis';

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

/** A redis-server child process on a free port, without persistence. */
export class PrivateRedisServer {
  private child: ChildProcess | null = null;

  private constructor(readonly port: number) {}

  static async start(): Promise<PrivateRedisServer> {
    const server = new PrivateRedisServer(await freePort());
    await server.restart();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server (again, on the same port) and waits until it answers PING. */
  async restart(): Promise<void> {
    if (this.child) throw new Error('the private redis-server is already running');
    const child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    child.on('exit', () => {
      if (this.child === child) this.child = null;
    });
    this.child = child;
    const probe = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0 });
    probe.on('error', () => undefined);
    try {
      for (let waited = 0; ; waited += 50) {
        if (
          await probe.ping().then(
            () => true,
            () => false,
          )
        )
          return;
        if (waited > 5000 || child.exitCode !== null)
          throw new Error(`redis-server did not start on port ${this.port}`);
        await sleep(50);
      }
    } finally {
      probe.disconnect();
    }
  }

  /** SIGSTOP: the server keeps its connections open but answers nothing. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  /** SIGKILL, and waits until the process is gone (the port is free again). */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }
}
