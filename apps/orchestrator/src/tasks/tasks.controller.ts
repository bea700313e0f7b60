import { Controller, Get, Param, UseGuards } from '@nestjs/common';
import { ApiBearerAuth, ApiTags } from '@nestjs/swagger';
import { Owner, TaskRepository } from '@loom/session';
import { JwtAuthGuard } from '../auth/jwt-auth.guard';
import { CurrentOwner } from '../auth/owner.decorator';
import { taskView } from '../conversations/views';

@ApiTags('tasks')
@ApiBearerAuth()
@UseGuards(JwtAuthGuard)
@Controller('v1/tasks')
export class TasksController {
  constructor(private readonly tasks: TaskRepository) {}

  @Get(':taskId')
  async get(@CurrentOwner() owner: Owner, @Param('taskId') taskId: string) {
    const task = await this.tasks.getById(owner, taskId);
    const view = taskView(task);
    view.sharedContext = await this.tasks.shared(owner, task.conversationId, taskId);
    return view;
  }
}
