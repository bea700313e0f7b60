import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';
import { Injectable } from '@nestjs/common';
import { loadEnvOrExit } from '../config/loom-env';
import { runAgent } from './bootstrap-agent';

const SECRET = 'S3cretPassw0rd-42';

/** process.exit and stderr of one call, mocked: what a start failure writes, and its exit code. */
async function failure(start: () => void): Promise<{ code: unknown; written: string }> {
  const exited = new Promise<unknown>((resolve) =>
    jest.spyOn(process, 'exit').mockImplementation((code) => resolve(code) as never),
  );
  const written: string[] = [];
  jest.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    written.push(String(chunk));
    return true;
  });
  try {
    start();
    return { code: await exited, written: written.join('') };
  } finally {
    jest.restoreAllMocks();
  }
}

/**
 * A start failure is one line on stderr, outside the logger: whatever secret its reason quotes
 * (a URL with a password, a token) is redacted there as the logger redacts it.
 */
describe('start failure lines are redacted', () => {
  it('loadEnvOrExit redacts a secret quoted by a configuration error', async () => {
    const { code, written } = await failure(() =>
      loadEnvOrExit({
        LOOM_PROFILE: 'embedded',
        LOOM_SHARED_ACL: JSON.stringify({ [`password=${SECRET}`]: {} }),
      }),
    );
    expect(code).toBe(1);
    expect(written).toContain('loom: invalid configuration: LOOM_SHARED_ACL');
    expect(written).not.toContain(SECRET);
    expect(written).toContain('[REDACTED_PASSWORD]');
  });

  it("runAgent redacts a secret quoted by the error its agent's start failed with", async () => {
    @Injectable()
    class Handler {
      constructor() {
        throw new Error(`cannot reach redis://:${SECRET}@10.1.2.3:6379`);
      }
      handle(): never {
        throw new Error('not called');
      }
    }
    const dir = mkdtempSync(path.join(tmpdir(), 'loom-start-failure-'));
    const saved = { ...process.env };
    Object.assign(process.env, {
      LOOM_PROFILE: 'embedded',
      LOOM_DATA_DIR: dir,
      LOG_LEVEL: 'fatal',
    });
    try {
      const { code, written } = await failure(() =>
        runAgent({
          descriptor: {
            agentType: 'tax-law',
            description: 'Income tax questions',
            role: 'specialist',
            intents: ['tax-law'],
            keywords: ['income tax'],
          },
          handler: Handler as never,
        }),
      );
      expect(code).toBe(1);
      expect(written).toMatch(/^loom tax-law agent: failed to start: /);
      expect(written).not.toContain(SECRET);
      expect(written).toContain('[REDACTED_PASSWORD]');
    } finally {
      process.env = saved;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
