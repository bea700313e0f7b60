import { ChaosCluster } from './chaos-cluster';
import { ChaosKiller } from './chaos-killer';
import { SeededRandom } from './random';

/** A deployment that records what the killer did to it, and runs nothing. */
function fakeCluster() {
  const done: string[] = [];
  let mysqlRunning = true;
  const slot = {
    name: 'orchestrator#0',
    app: 'orchestrator',
    env: {},
    child: {},
    killing: false,
    paused: false,
    starts: 1,
  };
  const cluster = {
    slots: [slot],
    kill: async () => void done.push('kill'),
    terminate: async () => void done.push('terminate'),
    launch: () => undefined,
    pause: () => void done.push('pause'),
    resume: () => undefined,
    redis: {
      pauseOne: async () => void done.push('redis pause'),
      restartOne: async () => void done.push('redis restart'),
    },
    stopMysql: async (signal: string) => {
      done.push(`mysql ${signal}`);
      mysqlRunning = false;
    },
    startMysql: async () => {
      done.push('mysql start');
      mysqlRunning = true;
    },
  };
  return { cluster: cluster as unknown as ChaosCluster, done, mysqlRunning: () => mysqlRunning };
}

describe('ChaosKiller', () => {
  // Issue 4's faults: an agent's and the orchestrator's kill -9, Redis stopped (SIGSTOP), MySQL
  // stopped. MySQL is the audit's own server (ChaosCluster), never the shared one.
  it('stops MySQL too, now and then, and starts it again', async () => {
    const { cluster, done, mysqlRunning } = fakeCluster();
    const killer = new ChaosKiller(cluster, new SeededRandom(29), [0, 0]);
    const running = killer.run();
    while (!done.some((d) => d.startsWith('mysql SIG'))) {
      if (done.length > 5000) break;
      await new Promise((r) => setImmediate(r));
    }
    killer.stop();
    await running;
    expect(done.filter((d) => d.startsWith('mysql SIG')).length).toBeGreaterThan(0);
    expect(killer.counts.mysqlStops).toBeGreaterThan(0);
    expect(mysqlRunning()).toBe(true);
  });
});
