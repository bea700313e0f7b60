/**
 * A Redis Cluster of a suite's own: three masters on free ports (never the shared Redis), and
 * on request a replica of each.
 */
import { ChildProcess, execFile, spawn } from 'child_process';
import { once } from 'events';
import { mkdtempSync, rmSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { promisify } from 'util';
import Redis from 'ioredis';
import { openRedis, RedisClient, RedisTarget } from '@loom/session';
import { TEST_REDIS_URL } from './infra';
import { freePort, sleep } from './private-redis';

const run = promisify(execFile);
const MASTERS = 3;
const START_MS = 20_000;
/** How long a replica may take to be elected (the node time-out, 5 s, plus the election). */
const FAILOVER_MS = 30_000;

export interface PrivateRedisClusterOptions {
  /** One replica for each master (`replicaPorts`), so that a master killed fails over. */
  replicas?: boolean;
}

/**
 * Three `cluster-enabled` redis-servers in a temp dir of their own, joined by
 * `redis-cli --cluster create`; with `replicas`, a fourth to sixth each replicating one of them
 * (CLUSTER MEET, CLUSTER REPLICATE). `stop()` kills them all and removes the dir.
 */
export class PrivateRedisCluster {
  /** The port of each master's replica (`replicas` only), in the order of `ports`. */
  readonly replicaPorts: number[] = [];

  private constructor(
    /** The masters' ports, as the cluster was created (a failover leaves them as they were). */
    readonly ports: number[],
    private readonly dir: string,
    /** Per node (masters, then replicas), its process and cluster bus port. */
    private readonly children: ChildProcess[],
    private readonly busPorts: number[] = [],
  ) {}

  static async start(options: PrivateRedisClusterOptions = {}): Promise<PrivateRedisCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'loom-redis-cluster-'));
    const ports: number[] = [];
    const children: ChildProcess[] = [];
    const busPorts: number[] = [];
    const cluster = new PrivateRedisCluster(ports, dir, children, busPorts);
    try {
      for (let i = 0; i < MASTERS; i++) {
        const port = await freePort();
        ports.push(port);
        busPorts.push(await freePort());
        children.push(spawnNode(port, busPorts[i], dir));
      }
      await Promise.all(ports.map((port) => answers(port)));
      await run('redis-cli', [
        ...['--cluster', 'create', ...cluster.seeds],
        ...['--cluster-replicas', '0', '--cluster-yes'],
      ]);
      await Promise.all(ports.map((port) => clusterOk(port)));
      if (options.replicas) await cluster.addReplicas();
      return cluster;
    } catch (err) {
      await cluster.stop();
      throw err;
    }
  }

  /**
   * A replica for every master: MEETs its master, REPLICATEs it once it knows it, and is done
   * when its link is up and every node knows every other (the masters vote on its failover).
   */
  private async addReplicas(): Promise<void> {
    for (let i = 0; i < MASTERS; i++) {
      const port = await freePort();
      this.replicaPorts.push(port);
      this.busPorts.push(await freePort());
      this.children.push(spawnNode(port, this.busPorts[MASTERS + i], this.dir));
    }
    await Promise.all(this.replicaPorts.map((port) => answers(port)));
    await Promise.all(
      this.replicaPorts.map(async (port, i) => {
        const master = new Redis(this.ports[i], '127.0.0.1');
        const masterId = String(await master.cluster('MYID').finally(() => master.disconnect()));
        await until(port, 'no MEET', async (node) => {
          await node.call('CLUSTER', 'MEET', '127.0.0.1', this.ports[i], this.busPorts[i]);
          return true;
        });
        await until(port, 'no REPLICATE', async (node) => {
          await node.cluster('REPLICATE', masterId);
          return true;
        });
        await until(port, 'no link to its master', async (node) =>
          (await node.info('replication')).includes('master_link_status:up'),
        );
      }),
    );
    const all = [...this.ports, ...this.replicaPorts];
    await Promise.all(
      all.map((port) =>
        until(port, `not every node known`, async (node) => {
          const info = await node.cluster('INFO');
          return info.includes('cluster_state:ok') && info.includes(`known_nodes:${all.length}`);
        }),
      ),
    );
  }

  /** The port of the replica of the master created at `masterPort` (`replicas` only). */
  replicaOf(masterPort: number): number {
    const port = this.replicaPorts[this.ports.indexOf(masterPort)];
    if (port === undefined)
      throw new Error(`no replica of ${masterPort}: start({ replicas: true })`);
    return port;
  }

  /**
   * Resolves once the node at `port` is a master (the replica of a killed master, elected after
   * the cluster node time-out) and the nodes still running see the cluster ok.
   */
  async promoted(port: number): Promise<void> {
    await until(
      port,
      'not promoted',
      async (node) => (await node.info('replication')).includes('role:master'),
      FAILOVER_MS,
    );
    const running = [...this.ports, ...this.replicaPorts].filter((p) => this.isRunning(p));
    await Promise.all(running.map((p) => clusterOk(p)));
  }

  private isRunning(port: number): boolean {
    const child = this.children[this.indexOf(port)];
    return !!child && child.exitCode === null && child.signalCode === null;
  }

  /** The index of the node at `port` in `children` and `busPorts` (-1: none of them). */
  private indexOf(port: number): number {
    const i = this.ports.indexOf(port);
    const r = this.replicaPorts.indexOf(port);
    return i >= 0 ? i : r >= 0 ? MASTERS + r : -1;
  }

  /** `host:port` of every master: REDIS_CLUSTER_NODES. */
  get seeds(): string[] {
    return this.ports.map((port) => `127.0.0.1:${port}`);
  }

  /** REDIS_URL beside REDIS_CLUSTER_NODES: one seed (credentials and TLS would come from it). */
  get url(): string {
    return `redis://127.0.0.1:${this.ports[0]}`;
  }

  /** A Cluster client, once ready. */
  async client(): Promise<RedisClient> {
    const redis = openRedis({ url: this.url, clusterNodes: this.seeds });
    redis.on('error', () => undefined);
    if (redis.status !== 'ready') await once(redis, 'ready');
    return redis;
  }

  /** Per master (`host:port`), the keys under `prefix` it holds. */
  async keysByMaster(prefix: string): Promise<Map<string, string[]>> {
    const out = new Map<string, string[]>();
    for (const port of this.ports) {
      const node = new Redis(port, '127.0.0.1');
      try {
        const keys: string[] = [];
        let cursor = '0';
        do {
          const [next, found] = await node.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
          cursor = next;
          keys.push(...found);
        } while (cursor !== '0');
        out.set(`127.0.0.1:${port}`, keys);
      } finally {
        node.disconnect();
      }
    }
    return out;
  }

  /**
   * SIGKILLs the master that holds `key` and starts it again on its port and nodes.conf: it
   * rejoins with its slots and no data (no persistence). Resolves once the cluster is ok again.
   */
  async restartMasterOf(key: string): Promise<void> {
    await this.restartMaster(await this.portOf(key));
  }

  /**
   * SIGKILLs the master at `port`, waits `afterMs`, and starts it again on its port and
   * nodes.conf (empty, with its slots). Resolves once the cluster is ok again.
   */
  async restartMaster(port: number, afterMs = 0): Promise<void> {
    const i = this.ports.indexOf(port);
    await this.kill(port);
    await sleep(afterMs);
    this.children[i] = spawnNode(this.ports[i], this.busPorts[i], this.dir);
    await answers(this.ports[i]);
    await Promise.all(this.ports.map((p) => clusterOk(p)));
  }

  /** SIGSTOP of the master at `port`: it keeps its connections open but answers nothing. */
  pause(port: number): void {
    this.children[this.indexOf(port)]?.kill('SIGSTOP');
  }

  resume(port: number): void {
    this.children[this.indexOf(port)]?.kill('SIGCONT');
  }

  /**
   * SIGKILLs the node at `port`: without replicas its slots stay down until it is started again;
   * a master with one fails over to it (see {@link promoted}).
   */
  async kill(port: number): Promise<void> {
    const child = this.children[this.indexOf(port)];
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await exited;
  }

  /** The port of the master that holds `key`'s slot. */
  async portOf(key: string): Promise<number> {
    const probe = await this.client();
    try {
      const slot = Number(await probe.cluster('KEYSLOT', key));
      const ranges = (await probe.cluster('SLOTS')) as unknown as Array<
        [number, number, [string, number]]
      >;
      return Number(ranges.find(([from, to]) => slot >= from && slot <= to)![2][1]);
    } finally {
      probe.disconnect();
    }
  }

  /**
   * Moves `slot` to the master at `toPort` as `redis-cli --cluster reshard` does: IMPORTING on
   * it, MIGRATING on its owner, its keys MIGRATEd, then every master told the new owner. A client
   * whose slot table still names the old owner gets MOVED for it from then on.
   */
  async moveSlot(slot: number, toPort: number): Promise<void> {
    await (
      await this.startSlotMove(slot, toPort)
    )();
  }

  /**
   * The first half of {@link moveSlot}: `slot` MIGRATING to the master at `toPort` with only
   * `keys` of it moved there, so the old owner answers ASK for those. Resolves to the second half
   * (the rest of its keys moved, every master told the new owner).
   */
  async startSlotMove(
    slot: number,
    toPort: number,
    keys: string[] = [],
  ): Promise<() => Promise<void>> {
    const nodes = new Map(this.ports.map((port) => [port, new Redis(port, '127.0.0.1')]));
    const close = () => nodes.forEach((node) => node.disconnect());
    try {
      const idOf = async (port: number) => String(await nodes.get(port)!.cluster('MYID'));
      const ranges = (await nodes.get(toPort)!.cluster('SLOTS')) as unknown as Array<
        [number, number, [string, number]]
      >;
      const fromPort = Number(ranges.find(([a, b]) => slot >= a && slot <= b)![2][1]);
      if (fromPort === toPort) {
        close();
        return async () => undefined;
      }
      const [from, to] = [nodes.get(fromPort)!, nodes.get(toPort)!];
      const [fromId, toId] = [await idOf(fromPort), await idOf(toPort)];
      await to.cluster('SETSLOT', slot, 'IMPORTING', fromId);
      await from.cluster('SETSLOT', slot, 'MIGRATING', toId);
      if (keys.length) await from.migrate('127.0.0.1', toPort, '', 0, 5000, 'KEYS', ...keys);
      return async () => {
        try {
          for (;;) {
            const left = (await from.cluster('GETKEYSINSLOT', slot, 100)) as string[];
            if (!left.length) break;
            await from.migrate('127.0.0.1', toPort, '', 0, 5000, 'KEYS', ...left);
          }
          for (const node of [to, from, ...nodes.values()])
            await node.cluster('SETSLOT', slot, 'NODE', toId);
        } finally {
          close();
        }
      };
    } catch (err) {
      close();
      throw err;
    }
  }

  /** Kills every node and removes the temp dir (nodes.conf and all). */
  async stop(): Promise<void> {
    await Promise.all(
      this.children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, 'exit');
        child.kill('SIGKILL');
        await exited;
      }),
    );
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function spawnNode(port: number, busPort: number, dir: string): ChildProcess {
  const args = [
    ...['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    ...['--cluster-enabled', 'yes', '--cluster-port', String(busPort)],
    ...['--cluster-config-file', join(dir, `nodes-${port}.conf`), '--dir', dir],
    ...['--cluster-node-timeout', '5000'],
  ];
  return spawn('redis-server', args, { stdio: 'ignore' });
}

/** Waits until `check` holds on the node at `port`, polling every 50 ms. */
async function until(
  port: number,
  what: string,
  check: (node: Redis) => Promise<boolean>,
  withinMs = START_MS,
) {
  const node = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0 });
  node.on('error', () => undefined);
  try {
    for (const end = Date.now() + withinMs; Date.now() < end; await sleep(50))
      if (await check(node).catch(() => false)) return;
    throw new Error(`redis-server on port ${port}: ${what} within ${withinMs} ms`);
  } finally {
    node.disconnect();
  }
}

const answers = (port: number) =>
  until(port, 'no answer', async (node) => (await node.ping()) === 'PONG');
const clusterOk = (port: number) =>
  until(port, 'cluster_state not ok', async (node) =>
    (await node.cluster('INFO')).includes('cluster_state:ok'),
  );

/**
 * Where a suite run `describe.each(['standalone', 'cluster'])` talks to Redis: the shared test
 * Redis, or a private cluster of its own (`stop()` ends it).
 */
export async function redisTargetFor(
  mode: 'standalone' | 'cluster',
): Promise<{ target: RedisTarget; stop(): Promise<void> }> {
  if (mode === 'standalone')
    return { target: { url: TEST_REDIS_URL }, stop: async () => undefined };
  const cluster = await PrivateRedisCluster.start();
  return {
    target: { url: cluster.url, clusterNodes: cluster.seeds },
    stop: () => cluster.stop(),
  };
}
