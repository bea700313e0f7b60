import { existsSync } from 'fs';
import { dirname, join } from 'path';

/** A Loom app started as a process by scripts/lib/processes.js, with the lines it printed. */
export type AppChild = import('child_process').ChildProcess & { app: string; lines: string[] };

/** What scripts/lib/processes.js offers (shared with start:all, the demo and test/system.ts). */
export interface AppProcesses {
  APPS: string[];
  startApp(
    app: string,
    env: Record<string, string>,
    opts?: { onLine?: (app: string, line: string) => void },
  ): AppChild;
  stopAll(children: AppChild[], signal?: string, graceMs?: number): Promise<void>;
  freePort(): Promise<number>;
  waitFor(check: () => Promise<unknown>, opts: { what: string; timeoutMs: number }): Promise<void>;
  signJwt(claims: Record<string, string>, secret: string): string;
}

/** scripts/lib/processes.js, found from wherever this runs (the sources or dist/). */
export function appProcesses(): AppProcesses {
  let dir = __dirname;
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir);
  return require(join(dir, 'scripts', 'lib', 'processes.js')) as AppProcesses;
}
