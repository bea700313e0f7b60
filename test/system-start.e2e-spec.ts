import { execFileSync } from 'child_process';
import { randomBytes } from 'crypto';
import { createConnection } from 'mysql2/promise';
import Redis from 'ioredis';
import { createTestDatabase, TEST_MYSQL_URL, TEST_REDIS_URL } from '@loom/testing';
import { startSystem } from './system';

/**
 * startSystem runs on the MariaDB and Redis every suite, helper and CI run shares: whatever it
 * makes there is removed by the suite's `stop()`, and when the apps never get ready (the suite
 * then has no system to stop) by startSystem itself. Its databases and key prefixes are named
 * `loom_sys_<pid>_…` and `loomsys_<pid>_…` after this process, so this suite sees its own only.
 */
describe('startSystem leaves nothing on the shared servers', () => {
  const ownDatabases = async () => {
    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query(`SHOW DATABASES LIKE 'loom\\_sys\\_${process.pid}\\_%'`);
      return (rows as Array<Record<string, string>>).map((r) => Object.values(r)[0]);
    } finally {
      await conn.end();
    }
  };
  const ownKeys = async (match = `loomsys_${process.pid}_*`) => {
    const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: 1 });
    try {
      const keys: string[] = [];
      let cursor = '0';
      do {
        const [next, found] = await redis.scan(cursor, 'MATCH', match);
        cursor = next;
        keys.push(...found);
      } while (cursor !== '0');
      return keys;
    } finally {
      redis.disconnect();
    }
  };
  /** The apps this process started that still run. */
  const ownApps = () => {
    try {
      return execFileSync('pgrep', ['-P', String(process.pid), '-f', 'dist/apps/'])
        .toString()
        .trim()
        .split('\n');
    } catch {
      return []; // pgrep exits 1 when it finds none
    }
  };

  it('given its own MYSQL_URL, makes no database of its own', async () => {
    const own = await createTestDatabase('loom_sysown');
    try {
      const sys = await startSystem({
        env: { MYSQL_URL: own.url },
        without: ['contract-law-agent', 'labor-law-agent', 'legal-research-agent'],
      });
      try {
        expect(await ownDatabases()).toEqual([]);
      } finally {
        await sys.stop();
      }
    } finally {
      await own.drop();
    }
  });

  it('given its own LOOM_KEY_PREFIX, leaves no key under it', async () => {
    const prefix = `loomsysown_${process.pid}_${randomBytes(4).toString('hex')}:`;
    const sys = await startSystem({
      env: { LOOM_KEY_PREFIX: prefix },
      without: ['contract-law-agent', 'legal-research-agent'],
    });
    try {
      // The apps ran on it: the agent's registration, the database's claim.
      expect(await ownKeys(`${prefix}*`)).not.toEqual([]);
    } finally {
      await sys.stop();
    }
    expect(await ownKeys(`${prefix}*`)).toEqual([]);
  });

  it('an orchestrator that never gets ready: the apps stopped, no database or keys left', async () => {
    await expect(startSystem({ appEnv: { orchestrator: { PORT: 'not-a-port' } } })).rejects.toThrow(
      /orchestrator/,
    );
    expect(await ownDatabases()).toEqual([]);
    expect(await ownKeys()).toEqual([]);
    expect(ownApps()).toEqual([]);
  });
});
