import { Controller, Get, Inject, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import { AGENT_REGISTRY, AgentRegistry } from '@loom/agent-kit';
import { JwtAuthGuard } from '../auth/jwt-auth.guard';

@ApiTags('agents')
@ApiBearerAuth()
@UseGuards(JwtAuthGuard)
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
