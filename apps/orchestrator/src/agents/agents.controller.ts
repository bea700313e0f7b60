import { Controller, Get, Inject } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';
import { AGENT_REGISTRY, AgentRegistry } from '@loom/agent-kit';
import { Authenticated } from '../auth/authenticated.decorator';
import { ApiErrors } from '../openapi/api-errors.decorator';
import { AgentList } from '../openapi/views.schema';

@ApiTags('agents')
@Authenticated()
@ApiErrors(401, 429, 503)
@Controller('v1/agents')
export class AgentsController {
  constructor(@Inject(AGENT_REGISTRY) private readonly registry: AgentRegistry) {}

  @Get()
  @ApiOkResponse({ type: AgentList, description: 'The agents registered now' })
  @ApiErrors(400)
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
