import {
  Inject,
  Injectable,
  Logger,
  OnApplicationBootstrap,
  OnApplicationShutdown,
} from '@nestjs/common';
import { AgentRegistration } from '../contracts/agent-descriptor';
import { AGENT_REGISTRY, AgentRegistry } from '../registry/agent-registry';
import { AGENT_DESCRIPTOR } from './agent-handler';
import { INSTANCE_ID } from './agent-runner';

export const HEARTBEAT_MS = 5000;

/**
 * Registers the agent at start, beats every few seconds, and leaves the registry on shutdown.
 * Each beat carries when this instance started: of instances of one type with different
 * descriptors (a rolling deploy), the most recently started live one's is in force.
 */
@Injectable()
export class AgentHeartbeat implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly log = new Logger('AgentHeartbeat');
  private readonly startedAt = Date.now();
  private timer?: NodeJS.Timeout;

  constructor(
    @Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry,
    @Inject(AGENT_DESCRIPTOR) private readonly descriptor: AgentRegistration,
    @Inject(INSTANCE_ID) private readonly instanceId: string,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const registered = await this.beat();
    this.timer = setInterval(() => void this.beat(), HEARTBEAT_MS);
    this.timer.unref();
    this.log.log(
      registered
        ? `registered ${this.descriptor.agentType} as ${this.instanceId}`
        : `${this.descriptor.agentType} (${this.instanceId}) registers once the registry answers`,
    );
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.registry.remove(this.descriptor.agentType, this.instanceId).catch(() => undefined);
  }

  /** One heartbeat; false when the registry did not take it. */
  private async beat(): Promise<boolean> {
    return this.registry.heartbeat(this.descriptor, this.instanceId, this.startedAt).then(
      () => true,
      (err) => {
        this.log.warn(`heartbeat failed: ${err.message}`);
        return false;
      },
    );
  }
}
