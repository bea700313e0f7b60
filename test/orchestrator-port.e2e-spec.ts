import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { AppProcess, startEmbeddedApp } from './system';
const { stopAll, waitFor } = require('../scripts/lib/processes');

/** PORT=0 (any free port) is a valid setting: the start line must name the port taken. */
describe('system: an orchestrator started with PORT=0', () => {
  let dataDir: string;
  const children: AppProcess[] = [];

  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'loom-port-test-'));
  });
  afterAll(async () => {
    await stopAll(children);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.each(['orchestrator', 'embedded'])(
    '%s logs the port it listens on, where /health answers',
    async (app) => {
      const { child } = await startEmbeddedApp(app, join(dataDir, app), {
        PORT: '0',
        LOG_LEVEL: 'info',
      });
      children.push(child);
      const port = Number(
        await waitFor(
          () => {
            for (const line of child.lines) {
              const m = /listening on port (\d+)/.exec(line);
              if (m) return m[1];
            }
            return undefined;
          },
          { what: `${app}'s start line`, timeoutMs: 60_000 },
        ),
      );
      expect(port).toBeGreaterThan(0);
      expect((await fetch(`http://127.0.0.1:${port}/health`)).ok).toBe(true);
    },
  );
});
