import { Controller, Get, Inject } from '@nestjs/common';
import { ApiTags } from '@nestjs/swagger';
import { AGENT_REGISTRY, AgentRegistry } from '@loom/agent-kit';
import { Authenticated } from '../auth/authenticated.decorator';

@ApiTags('agents')
@Authenticated()
@Controller('v1/agents')
export class AgentsController {
  constructor(@Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry) {}

  @Get()
  async list() {
    const live = await this.registry.live();
    return {
      items: live.map((a) => ({
        agentType: a.descriptor.agentType,
        description: a.descriptor.description,
        instances: a.instances,
      })),
    };
  }
}
