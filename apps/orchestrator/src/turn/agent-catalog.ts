import { performance } from 'perf_hooks';
import { Inject, Injectable, Logger } from '@nestjs/common';
import {
  AGENT_REGISTRY,
  AgentDescriptor,
  AgentRegistration,
  AgentRegistry,
  RegisteredAgent,
  wellFormedDescriptor,
} from '@loom/agent-kit';
import {
  LoomError,
  LoomErrorCode,
  SharedClock,
  SystemRepository,
  SystemSessions,
} from '@loom/session';

interface CatalogEntry {
  descriptor: AgentRegistration;
  lastSeenAt: number;
}

type Catalog = Record<string, CatalogEntry>;

const KEY = 'agents';
/**
 * Agent types an operator retired (`npm run agents:retire`), with when: not planned again until
 * an instance of the type runs after that. Written only by that command, read by orchestrators.
 */
export const RETIRED_KEY = 'retired';
/** How old a read of the retired types may be when a step is dispatched (ms). */
const RETIRED_FRESH_MS = 2000;
/** An agent type not seen running for this long is no longer planned. */
const RETENTION_MS = 7 * 86_400_000;
/** How stale this process's copy of the stored catalog (and its last-seen stamps) may get. */
const REFRESH_MS = 60_000;

/**
 * The agent types a turn may be planned with: every type seen running in the last week, kept in
 * a system session so every orchestrator (also one started while an agent is down) knows it. A
 * type with no live instance can still be the required specialist: its request waits in the
 * stream until an instance starts, or fails with TIMEOUT after AGENT_TIMEOUT_MS.
 */
@Injectable()
export class AgentCatalog {
  private readonly log = new Logger('AgentCatalog');
  private catalog: Catalog | null = null;
  private retired: Record<string, number> = {};
  private loadedAt = 0;
  /** The retired types as `retiredNow` last read them, and when (monotonic ms). */
  private retiredRead?: { value: Promise<Record<string, number>>; at: number };

  constructor(
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    private readonly system: SystemRepository,
    /**
     * The deployment's clock (Redis TIME, no round trip of its own): last sightings are compared
     * with retirements stamped by `agents:retire` on another host, and with other replicas'.
     */
    @Inject(SharedClock) private readonly clock: { now(): number },
  ) {}

  async agents(): Promise<{ agents: AgentDescriptor[]; live: Set<string> }> {
    const running = await this.registry.live().catch(() => {
      throw new LoomError(LoomErrorCode.UNAVAILABLE, 'the agent registry is unavailable');
    });
    const catalog = await this.remember(running);
    const live = new Set(running.map((a) => a.descriptor.agentType));
    const now = this.clock.now();
    const agents = Object.entries(catalog)
      .filter(
        ([type, e]) =>
          live.has(type) ||
          (now - e.lastSeenAt < RETENTION_MS && e.lastSeenAt > retiredAt(this.retired, type)),
      )
      .map(([, e]) => e.descriptor)
      // A catalog saved before descriptors were checked may hold a malformed one.
      .filter((d) => wellFormedDescriptor(d) !== null);
    return { agents, live };
  }

  /**
   * Whether `agentType` was retired (`npm run agents:retire`) and has not run since: a step of a
   * task planned before the retirement and dispatched after it (a recovery, a retry, a later
   * wave), which no instance will ever answer. Read at most RETIRED_FRESH_MS old, not from the
   * catalog's copy (up to a minute old), so a turn's steps share one read of the retired types
   * rather than adding a store read to every dispatch; the registry is asked for a retired one only.
   */
  async retiredNow(agentType: string): Promise<boolean> {
    const now = performance.now();
    if (!this.retiredRead || now - this.retiredRead.at > RETIRED_FRESH_MS) {
      const value = this.system
        .value<Record<string, number>>(SystemSessions.catalog, RETIRED_KEY)
        .then((r) => r ?? {});
      this.retiredRead = { value, at: now };
      // A failed read is not kept: the next step reads again.
      value.catch(() => {
        if (this.retiredRead?.value === value) this.retiredRead = undefined;
      });
    }
    const at = retiredAt(await this.retiredRead.value, agentType);
    if (at === -Infinity) return false;
    const { live } = await this.agents();
    if (live.has(agentType)) return false;
    const seen =
      this.catalog && Object.hasOwn(this.catalog, agentType)
        ? this.catalog[agentType].lastSeenAt
        : -Infinity;
    return seen <= at;
  }

  /**
   * Merges what runs now into the catalog; writes it only when something changed or aged. A
   * type not seen running for RETENTION_MS is no longer planned: it leaves the catalog (this
   * process's copy and the stored one) at the next refresh, so a deployment that renames or
   * versions its agent types keeps a catalog of the last week's, not of every one it ever ran.
   */
  private async remember(running: RegisteredAgent[]): Promise<Catalog> {
    const now = this.clock.now();
    let changed = false;
    if (!this.catalog || now - this.loadedAt > REFRESH_MS) {
      const [stored, retired] = await Promise.all([
        this.system.value<Catalog>(SystemSessions.catalog, KEY).catch(() => null),
        this.system
          .value<Record<string, number>>(SystemSessions.catalog, RETIRED_KEY)
          .catch(() => null),
      ]);
      this.retired = retired ?? {};
      const merged: Catalog = { ...stored };
      for (const [type, entry] of Object.entries(this.catalog ?? {}))
        if (!Object.hasOwn(merged, type) || merged[type].lastSeenAt < entry.lastSeenAt)
          merged[type] = entry;
      for (const [type, entry] of Object.entries(merged))
        if (!(now - entry.lastSeenAt < RETENTION_MS)) {
          delete merged[type];
          changed = true;
        }
      this.catalog = merged;
      this.loadedAt = now;
    }
    for (const { descriptor } of running) {
      const type = descriptor.agentType;
      const known = Object.hasOwn(this.catalog, type) ? this.catalog[type] : undefined;
      if (
        known &&
        now - known.lastSeenAt < REFRESH_MS &&
        known.lastSeenAt > retiredAt(this.retired, type) &&
        JSON.stringify(known.descriptor) === JSON.stringify(descriptor)
      )
        continue;
      this.catalog[type] = { descriptor, lastSeenAt: now };
      changed = true;
    }
    if (changed)
      await this.system
        .saveValue(SystemSessions.catalog, KEY, this.catalog)
        .catch((err) => this.log.warn(`agent catalog not saved: ${err.message}`));
    return this.catalog;
  }
}

/** When `type` was retired (own entries only: an agent type may be named `constructor`). */
function retiredAt(retired: Record<string, number>, type: string): number {
  return Object.hasOwn(retired, type) ? retired[type] : -Infinity;
}
