export * from './conversation.model';
export * from './task.model';
export * from './agent.model';
