import { randomBytes } from 'crypto';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { AppProcess, client, startEmbeddedApp } from './system';
const { stopAll, waitFor, signJwt } = require('../scripts/lib/processes');

const TURNS = 3;

/**
 * The embedded profile (one process, no Redis) given several turns of one conversation at once,
 * as a client that sends again before the answer comes: they run one after the other, as with
 * Redis (DESIGN.md: turns of one conversation in order), each answered 201 and stored once;
 * none is superseded halfway by the next with 409 "fencing token is not the current one".
 */
describe('system: concurrent turns of one conversation in the embedded profile', () => {
  const secret = randomBytes(24).toString('hex');
  let dataDir: string;
  let child: AppProcess | undefined;

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-embedded-concurrent-'));
  });
  afterAll(async () => {
    if (child) await stopAll([child]);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('runs them one after the other', async () => {
    const started = await startEmbeddedApp('embedded', dataDir, {
      LOOM_JWT_SECRET: secret,
      LOG_LEVEL: 'warn',
      LLM_OFFLINE_DELAY_MS: '300',
    });
    child = started.child;
    const api = client(started.base, signJwt({ sub: 'alice', tid: 'tenant-e' }, secret));
    await waitFor(async () => (await api('GET', '/v1/agents')).body?.items?.length >= 3, {
      what: 'three agents in the embedded process',
      timeoutMs: 60_000,
    });
    const id = (await api('POST', '/v1/conversations', {})).body.conversationId;
    const answers = await Promise.all(
      Array.from({ length: TURNS }, (_, i) =>
        api('POST', `/v1/conversations/${id}/messages`, { content: `劳动合同问题 ${i}` }),
      ),
    );
    expect(answers.map((a) => [a.status, a.body?.message])).toEqual(
      Array(TURNS).fill([201, undefined]),
    );
    const stored = (await api('GET', `/v1/conversations/${id}/messages`)).body.items;
    expect(stored.map((m: any) => m.role)).toEqual(
      Array.from({ length: 2 * TURNS }, (_, i) => (i % 2 === 0 ? 'user' : 'assistant')),
    );
  });
});
