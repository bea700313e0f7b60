import { Controller, Get, Param } from '@nestjs/common';
import { ApiOkResponse, ApiTags } from '@nestjs/swagger';
import { Owner, TaskRepository } from '@loom/session';
import { Authenticated } from '../auth/authenticated.decorator';
import { CurrentOwner } from '../auth/owner.decorator';
import { taskView } from '../conversations/views';
import { ApiErrors, ApiIdParam } from '../openapi/api-errors.decorator';
import { TaskView } from '../openapi/views.schema';

@ApiTags('tasks')
@Authenticated()
@ApiErrors(401, 429, 503)
@Controller('v1/tasks')
export class TasksController {
  constructor(private readonly tasks: TaskRepository) {}

  @Get(':taskId')
  @ApiIdParam('taskId')
  @ApiOkResponse({ type: TaskView })
  @ApiErrors(400, 404)
  async get(@CurrentOwner() owner: Owner, @Param('taskId') taskId: string) {
    const task = await this.tasks.getById(owner, taskId);
    const view = taskView(task);
    // The writes of the executions that succeeded: a failed attempt's are not the task's data.
    view.sharedContext = await this.tasks.sharedFor(owner, { task });
    return view;
  }
}
