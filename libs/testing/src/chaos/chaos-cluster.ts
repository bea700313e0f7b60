import { randomBytes } from 'crypto';
import { createConnection } from 'mysql2/promise';
import { AppChild, appProcesses } from '../app-processes';
import { PrivateMariaDb } from '../private-mariadb';
import { sleep } from '../private-redis';
import { ChaosRedis, ClusterChaosRedis, StandaloneChaosRedis } from './chaos-redis';

type ChildLike = AppChild;

/** One place in the deployment: an app that the killer stops and the cluster starts again. */
export interface Slot {
  name: string;
  app: string;
  env: Record<string, string>;
  child: ChildLike | null;
  /** Set while the harness itself kills this slot's process: its exit is expected. */
  killing: boolean;
  paused: boolean;
  starts: number;
}

export interface UnexpectedExit {
  slot: string;
  code: number | null;
  signal: string | null;
  lastLines: string[];
}

/** What the apps logged that the audit reads: executions per id, errors, crash output. */
export interface LogTally {
  executing: Map<string, number>;
  executed: Map<string, Array<{ slot: string; taskId: unknown }>>;
  errors: Map<string, number>;
  /** The first whole line of each error message, stack included. */
  errorSamples: Map<string, string>;
  nonJson: Map<string, number>;
}

/**
 * Every app as real processes (two orchestrators on fixed ports, `agentInstances` of each agent)
 * on a private redis-server, or a private Redis Cluster (`redisCluster`), which the killer may
 * pause and restart empty, and a private MariaDB server (never the shared one), which the killer
 * may stop and start again.
 */
export class ChaosCluster {
  readonly slots: Slot[] = [];
  readonly exits: UnexpectedExit[] = [];
  readonly tally: LogTally = {
    executing: new Map(),
    executed: new Map(),
    errors: new Map(),
    errorSamples: new Map(),
    nonJson: new Map(),
  };
  readonly bases: string[] = [];
  /** The longest a SIGTERM took to end each app's process (those not SIGKILLed first). */
  readonly stopMs: Record<string, number> = {};
  private readonly procs = appProcesses();
  private jwtSecret = '';
  mysqlUrl = '';
  mysql: PrivateMariaDb | null = null;
  redis!: ChaosRedis;
  prefix = 'loomchaos:';
  private closing = false;

  static async start(
    env: Record<string, string>,
    opts: { agentInstances?: number; redisCluster?: boolean } = {},
  ): Promise<ChaosCluster> {
    const cluster = new ChaosCluster();
    try {
      await cluster.boot(env, opts.agentInstances ?? 2, opts.redisCluster ?? false);
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  private async boot(
    extraEnv: Record<string, string>,
    agentInstances: number,
    redisCluster: boolean,
  ): Promise<void> {
    this.redis = redisCluster
      ? await ClusterChaosRedis.start()
      : await StandaloneChaosRedis.start();
    this.mysql = await PrivateMariaDb.start();
    const admin = await createConnection(this.mysql.url);
    await admin.query(
      'CREATE DATABASE loom_chaos CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci',
    );
    await admin.end();
    this.mysqlUrl = `${this.mysql.url}/loom_chaos`;
    this.jwtSecret = randomBytes(24).toString('hex');
    const env: Record<string, string> = {
      ...this.redis.env,
      MYSQL_URL: this.mysqlUrl,
      LOOM_KEY_PREFIX: this.prefix,
      LOOM_JWT_SECRET: this.jwtSecret,
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'info',
      LOOM_RATE_LIMIT_PER_MINUTE: '0',
      ...extraEnv,
    };
    for (let i = 0; i < 2; i++) {
      const port = await this.procs.freePort();
      this.bases.push(`http://127.0.0.1:${port}`);
      this.slots.push(
        this.slot(`orchestrator#${i}`, 'orchestrator', { ...env, PORT: String(port) }),
      );
    }
    for (const app of this.procs.APPS.filter((a) => a !== 'orchestrator'))
      for (let i = 0; i < agentInstances; i++) this.slots.push(this.slot(`${app}#${i}`, app, env));
    // The first orchestrator migrates alone: several apps racing for the migration lock only slow the start.
    this.launch(this.slots[0]);
    await this.waitHealthy(this.bases[0]);
    for (const s of this.slots.slice(1)) this.launch(s);
    await this.ready();
  }

  private slot(name: string, app: string, env: Record<string, string>): Slot {
    return { name, app, env, child: null, killing: false, paused: false, starts: 0 };
  }

  token(tenantId: string, userId: string): string {
    return this.procs.signJwt({ sub: userId, tid: tenantId }, this.jwtSecret);
  }

  /** Starts the slot's process; an exit the harness did not cause is recorded, and restarted. */
  launch(slot: Slot): void {
    const recent: string[] = [];
    const child = this.procs.startApp(slot.app, slot.env, {
      onLine: (_app, line) => {
        recent.push(line);
        if (recent.length > 40) recent.shift();
        this.read(slot, line);
      },
    });
    slot.child = child;
    slot.killing = false;
    slot.paused = false;
    slot.starts += 1;
    child.on('exit', (code, signal) => {
      if (slot.child === child) slot.child = null;
      if (slot.killing || this.closing) return;
      this.exits.push({ slot: slot.name, code, signal, lastLines: [...recent] });
      // Keep the deployment whole: the audit goes on, the exit stays a finding.
      setTimeout(() => !this.closing && !slot.child && this.launch(slot), 500);
    });
  }

  private read(slot: Slot, line: string): void {
    let j: Record<string, unknown>;
    try {
      j = JSON.parse(line);
    } catch {
      const key = `${slot.app}: ${line.slice(0, 160)}`;
      this.tally.nonJson.set(key, (this.tally.nonJson.get(key) ?? 0) + 1);
      return;
    }
    const msg = String(j.msg ?? '');
    if (typeof j.agentSessionId === 'string') {
      const id = j.agentSessionId;
      if (msg.startsWith('executing'))
        this.tally.executing.set(id, (this.tally.executing.get(id) ?? 0) + 1);
      if (msg === 'executed')
        this.tally.executed.set(id, [
          ...(this.tally.executed.get(id) ?? []),
          { slot: slot.name, taskId: j.taskId },
        ]);
    }
    // Levels are labels (LOG_FORMAT json), or pino's numbers.
    if (
      j.level === 'error' ||
      j.level === 'fatal' ||
      (typeof j.level === 'number' && j.level >= 50)
    ) {
      const key = `${slot.app}: ${msg.slice(0, 160)}`;
      this.tally.errors.set(key, (this.tally.errors.get(key) ?? 0) + 1);
      if (!this.tally.errorSamples.has(key)) this.tally.errorSamples.set(key, line.slice(0, 3000));
    }
  }

  /** SIGKILL: the exit is expected; the process is not started again here. */
  async kill(slot: Slot): Promise<void> {
    const child = slot.child;
    if (!child) return;
    slot.killing = true;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGCONT');
    child.kill('SIGKILL');
    await gone;
  }

  /**
   * SIGTERM, then SIGKILL after `killAfterMs` if it still runs (a platform's stop grace, cut
   * short at random). A stop that ends other than cleanly (exit code 0, or the SIGTERM Nest
   * raises again once its shutdown hooks ran), or that still runs 15 s after the SIGTERM, is a
   * finding.
   */
  async terminate(slot: Slot, killAfterMs: number): Promise<void> {
    const child = slot.child;
    if (!child) return;
    slot.killing = true;
    let killed = false;
    const gone = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      child.once('exit', (code, signal) => resolve({ code, signal })),
    );
    child.kill('SIGTERM');
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, killAfterMs);
    const sent = Date.now();
    const { code, signal } = await gone;
    clearTimeout(timer);
    const tookMs = Date.now() - sent;
    this.stopMs[slot.app] = Math.max(this.stopMs[slot.app] ?? 0, killed ? 0 : tookMs);
    const clean = code === 0 || signal === 'SIGTERM';
    if ((!killed && !clean) || (killed && killAfterMs > 15_000))
      this.exits.push({
        slot: slot.name,
        code,
        signal: killed ? `SIGKILL: still running ${killAfterMs} ms after SIGTERM` : signal,
        lastLines: child.lines.slice(-40),
      });
  }

  pause(slot: Slot): void {
    if (!slot.child) return;
    slot.paused = true;
    slot.child.kill('SIGSTOP');
  }

  resume(slot: Slot): void {
    if (!slot.child || !slot.paused) return;
    slot.paused = false;
    slot.child.kill('SIGCONT');
  }

  /** Stops the audit's MySQL server: SIGKILL (a crash) or SIGTERM (a clean shutdown). */
  async stopMysql(signal: 'SIGKILL' | 'SIGTERM'): Promise<void> {
    await this.mysql?.stop(signal);
  }

  /** Starts the audit's MySQL server again on its data (no-op while it runs). */
  async startMysql(): Promise<void> {
    if (this.mysql && !this.mysql.running) await this.mysql.restart();
  }

  /** Every slot running and not paused (what the quiet period starts from). */
  async heal(): Promise<void> {
    await this.startMysql();
    for (const s of this.slots) {
      this.resume(s);
      if (!s.child) this.launch(s);
    }
    this.redis.resumeAll();
    await this.ready();
  }

  async ready(): Promise<void> {
    for (const base of this.bases) await this.waitHealthy(base);
    const token = this.token('probe', 'probe00');
    const types = [
      ...new Set(this.slots.map((s) => s.app).filter((a) => a !== 'orchestrator')),
    ].map((a) => a.replace(/-agent$/, ''));
    await this.procs.waitFor(
      async () => {
        const res = await fetch(`${this.bases[0]}/v1/agents`, {
          headers: { authorization: `Bearer ${token}` },
        });
        if (!res.ok) return false;
        const items = ((await res.json()) as { items: Array<{ agentType: string }> }).items;
        return types.every((t) => items.some((a) => a.agentType === t));
      },
      { what: 'every agent registered', timeoutMs: 90_000 },
    );
  }

  private waitHealthy(base: string): Promise<void> {
    return this.procs.waitFor(
      async () => (await fetch(`${base}/health`).catch(() => null))?.status === 200,
      { what: `${base}/health`, timeoutMs: 90_000 },
    );
  }

  /** Stops every process, the private redis-server (or cluster), and drops the database. */
  async stop(): Promise<void> {
    this.closing = true;
    for (const s of this.slots) if (s.child && s.paused) s.child.kill('SIGCONT');
    this.redis?.resumeAll();
    await this.procs.stopAll(
      this.slots.map((s) => s.child).filter((c): c is ChildLike => c !== null),
      'SIGKILL',
    );
    await sleep(100);
    await this.redis?.stop();
    await this.mysql?.destroy();
  }
}
