import { spawn, spawnSync } from 'child_process';
import { AddressInfo, connect, createServer, Socket } from 'net';
import { join } from 'path';
import { createTestDatabase, TEST_MYSQL_URL } from '@loom/testing';
const { root } = require('../scripts/lib/processes');

/**
 * `npm run migration:run` changes the database of MYSQL_URL: asked for help, or given an
 * argument it does not take, it must say so and touch nothing. (MYSQL_URL names a closed port
 * here: a run that tried to migrate would fail to connect instead.)
 */
describe('system: npm run migration:run arguments', () => {
  const migrate = (...args: string[]) =>
    spawnSync(
      process.execPath,
      [join(root, 'dist', 'libs', 'session', 'src', 'cli', 'migrate.js'), ...args],
      {
        env: { ...process.env, MYSQL_URL: 'mysql://root@127.0.0.1:1/loom_migration_cli' },
        encoding: 'utf8',
        timeout: 60_000,
      },
    );

  it('prints its usage for --help and exits 0, migrating nothing', () => {
    const out = migrate('--help');
    expect(out.status).toBe(0);
    expect(out.stdout).toContain('usage: npm run migration:run');
  });

  it('refuses an argument in one line, migrating nothing', () => {
    const out = migrate('production');
    expect(out.status).toBe(2);
    expect(out.stderr.trim().split('\n')).toHaveLength(1);
    expect(out.stderr).toContain('usage: npm run migration:run');
  });
});

/**
 * Its last statement, the list of what is applied, is bounded by DB_START_TIMEOUT_MS like the
 * rest: a server that stops answering then ends the run with one line, not a wait for good.
 */
describe('system: npm run migration:run on a server that stops answering after migrating', () => {
  it('gives up on listing the migrations after DB_START_TIMEOUT_MS, exit 1', async () => {
    const db = await createTestDatabase('loom_migrate_cli');
    const target = new URL(TEST_MYSQL_URL);
    // A port in front of the shared server that stops passing a connection's bytes once it sends
    // the list's SELECT: for that statement, the server is one that stopped answering.
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      const upstream = connect(Number(target.port || 3306), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('error', () => undefined).on('close', () => (client.destroy(), upstream.destroy()));
      }
      upstream.pipe(client);
      client.on('data', (chunk: Buffer) => {
        if (chunk.includes('SELECT name FROM loom_migrations')) upstream.unpipe(client);
        else upstream.write(chunk);
      });
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const { port } = proxy.address() as AddressInfo;
    try {
      const child = spawn(
        process.execPath,
        [join(root, 'dist', 'libs', 'session', 'src', 'cli', 'migrate.js')],
        {
          env: {
            ...process.env,
            MYSQL_URL: `mysql://root@127.0.0.1:${port}/${db.name}`,
            DB_START_TIMEOUT_MS: '2000',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += String(d)));
      const kill = setTimeout(() => child.kill('SIGKILL'), 60_000);
      const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
      clearTimeout(kill);
      expect(code).toBe(1);
      expect(stderr.trim().split('\n')).toHaveLength(1);
      expect(stderr).toMatch(/did not answer in 2000 ms \(DB_START_TIMEOUT_MS\)/);
    } finally {
      sockets.forEach((s) => s.destroy());
      await new Promise((resolve) => proxy.close(resolve));
      await db.drop();
    }
  });
});
