import {
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
} from '@nestjs/common';
import { performance } from 'perf_hooks';
import { runWithMdc } from '@loom/observability';
import { SharedClock } from '@loom/session';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { AGENT_REGISTRY, AgentRegistry, HeartbeatResult } from '../registry/agent-registry';
import { descriptorDifference } from '../registry/descriptor-difference';
import { AGENT_DESCRIPTOR, agentService } from './agent-handler';
import { INSTANCE_ID } from './agent-runner';

export const HEARTBEAT_MS = 5000;

/**
 * Registers the agent at start, beats every few seconds, and leaves the registry on shutdown.
 * Each beat carries when this instance started: of instances of one type with different
 * descriptors (a rolling deploy), the most recently started live one's is in force, and this
 * one warns once while another's is. The start is on the SharedClock (Redis's time less this
 * process's monotonic uptime), not this host's wall clock: an old instance on a host whose clock
 * runs ahead would otherwise keep its descriptor in force over the version deployed after it.
 */
@Injectable()
export class AgentHeartbeat implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('AgentHeartbeat');
  /** This instance's start on the monotonic clock, and on this host's (until Redis answered). */
  private readonly startedMono = performance.now();
  private readonly startedLocal = Date.now();
  /** Its start on the shared clock, fixed once that clock has read Redis's time. */
  private startedShared?: number;
  private timer?: NodeJS.Timeout;
  /** The in-force registration last warned about, so each is warned about once. */
  private warned: string | null = null;

  constructor(
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    @Inject(AGENT_DESCRIPTOR) private readonly descriptor: AgentRegistration,
    @Inject(INSTANCE_ID) private readonly instanceId: string,
    private readonly clock: SharedClock,
  ) {}

  onApplicationBootstrap(): Promise<void> {
    // Its lines name this agent also in a process that hosts more than one app (the embedded profile).
    return runWithMdc(
      {
        service: agentService(this.descriptor.agentType),
        agentType: this.descriptor.agentType,
        agentId: this.instanceId,
      },
      async () => {
        const registered = await this.beat();
        this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
        this.timer.unref();
        this.log.log(
          registered
            ? `registered ${this.descriptor.agentType} as ${this.instanceId}`
            : `${this.descriptor.agentType} (${this.instanceId}) registers once the registry answers`,
        );
      },
    );
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.registry.remove(this.descriptor.agentType, this.instanceId).catch(() => undefined);
  }

  /** One heartbeat; false when the registry did not take it. */
  private async beat(): Promise<boolean> {
    return this.registry.heartbeat(this.descriptor, this.instanceId, this.startedAt()).then(
      (result) => {
        this.noteInForce(result);
        return true;
      },
      (err) => {
        this.log.warn(`heartbeat failed: ${err.message}`);
        return false;
      },
    );
  }

  /**
   * When this instance started, on the shared clock once it has read Redis's time (the app's
   * SharedClock read it before the app started; when Redis did not answer then, a later beat
   * asks again), on this host's clock until then (the embedded profile: one process, no Redis).
   */
  private startedAt(): number {
    if (this.startedShared === undefined) {
      if (this.clock.offsetFloor() === undefined) void this.clock.sync();
      else
        this.startedShared = Math.round(this.clock.now() - (performance.now() - this.startedMono));
    }
    return this.startedShared ?? this.startedLocal;
  }

  /** One warning per in-force registration that differs from this instance's in what is planned. */
  private noteInForce({ inForce }: HeartbeatResult): void {
    const difference = inForce && descriptorDifference(this.descriptor, inForce.descriptor);
    if (!inForce || !difference) {
      if (this.warned)
        this.log.log(`${this.descriptor.agentType}: this instance's descriptor is in force`);
      this.warned = null;
      return;
    }
    const key = `${inForce.instanceId}\n${JSON.stringify(inForce.descriptor)}`;
    if (key === this.warned) return;
    this.warned = key;
    this.log.warn(
      `${this.descriptor.agentType}: the orchestrators plan with the descriptor of instance ` +
        `${inForce.instanceId} (started ${new Date(inForce.startedAt).toISOString()}), ` +
        `not this one's (${this.instanceId}, started ${new Date(this.startedAt()).toISOString()}): ` +
        `it differs in ${difference}`,
    );
  }
}
