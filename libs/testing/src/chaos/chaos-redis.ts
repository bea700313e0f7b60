import { PrivateRedisServer, sleep } from '../private-redis';
import { PrivateRedisCluster } from '../private-redis-cluster';
import { SeededRandom } from './random';

/** The Redis the audit's apps run on, and the faults the killer may cause in it. */
export interface ChaosRedis {
  /** What every app gets: REDIS_URL, and REDIS_CLUSTER_NODES in cluster mode. */
  readonly env: Record<string, string>;
  /** One URL per redis-server that holds data (to scan keys node by node). */
  readonly nodeUrls: string[];
  readonly describe: string;
  /** SIGSTOP of the redis-server (a random master of a cluster) for `forMs`, then SIGCONT. */
  pauseOne(rnd: SeededRandom, forMs: number): Promise<void>;
  /** SIGKILL of the redis-server (a random master), started again empty after `afterMs`. */
  restartOne(rnd: SeededRandom, afterMs: number): Promise<void>;
  /** SIGCONT to every server the killer paused. */
  resumeAll(): void;
  /** Kills every server (and removes a cluster's temp dir). */
  stop(): Promise<void>;
}

/** One private redis-server (the harness's standalone mode). */
export class StandaloneChaosRedis implements ChaosRedis {
  private constructor(readonly server: PrivateRedisServer) {}

  static async start(): Promise<StandaloneChaosRedis> {
    return new StandaloneChaosRedis(await PrivateRedisServer.start());
  }

  get env(): Record<string, string> {
    return { REDIS_URL: this.server.url };
  }

  get nodeUrls(): string[] {
    return [this.server.url];
  }

  get describe(): string {
    return `redis-server ${this.server.url}`;
  }

  async pauseOne(_rnd: SeededRandom, forMs: number): Promise<void> {
    this.server.pause();
    await sleep(forMs);
    this.server.resume();
  }

  async restartOne(_rnd: SeededRandom, afterMs: number): Promise<void> {
    await this.server.kill();
    await sleep(afterMs);
    await this.server.restart();
  }

  resumeAll(): void {
    this.server.resume();
  }

  async stop(): Promise<void> {
    this.server.resume();
    await this.server.kill();
  }
}

/**
 * A private three-master Redis Cluster (`--redis-cluster`): a pause stops one random master;
 * a restart SIGKILLs one and starts it again empty on its port and nodes.conf, so it rejoins
 * with its slots and none of its keys.
 */
export class ClusterChaosRedis implements ChaosRedis {
  private readonly paused = new Set<number>();

  private constructor(readonly cluster: PrivateRedisCluster) {}

  static async start(): Promise<ClusterChaosRedis> {
    return new ClusterChaosRedis(await PrivateRedisCluster.start());
  }

  get env(): Record<string, string> {
    return { REDIS_URL: this.cluster.url, REDIS_CLUSTER_NODES: this.cluster.seeds.join(',') };
  }

  get nodeUrls(): string[] {
    return this.cluster.ports.map((port) => `redis://127.0.0.1:${port}`);
  }

  get describe(): string {
    return `Redis Cluster ${this.cluster.seeds.join(',')}`;
  }

  async pauseOne(rnd: SeededRandom, forMs: number): Promise<void> {
    const port = rnd.pick(this.cluster.ports.filter((p) => !this.paused.has(p)));
    if (port === undefined) return;
    this.paused.add(port);
    this.cluster.pause(port);
    await sleep(forMs);
    this.paused.delete(port);
    this.cluster.resume(port);
  }

  async restartOne(rnd: SeededRandom, afterMs: number): Promise<void> {
    const port = rnd.pick(this.cluster.ports);
    this.paused.delete(port);
    await this.cluster.restartMaster(port, afterMs);
  }

  resumeAll(): void {
    for (const port of this.cluster.ports) this.cluster.resume(port);
    this.paused.clear();
  }

  async stop(): Promise<void> {
    await this.cluster.stop();
  }
}
