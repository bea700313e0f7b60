/** The state keys one conversation's session holds (docs/session-library.md). */
export const StateKeys = {
  conversation: 'conversation',
  messages: 'messages',
  summary: 'summary',
  tasks: 'tasks',
  task: (taskId: string) => `task:${taskId}`,
  shared: (taskId: string) => `task:${taskId}:shared`,
  agent: (agentSessionId: string) => `agent:${agentSessionId}`,
  idempotency: (keyHash: string) => `idem:${keyHash}`,
  /** Stored in a session of its own, keyed by task id: which conversation a task belongs to. */
  taskRef: 'task-ref',
} as const;

export type Layer = 'conversation' | 'task' | 'agent';

export function layerOf(stateKey: string): Layer {
  if (stateKey.startsWith('agent:')) return 'agent';
  if (stateKey.startsWith('task:') || stateKey === StateKeys.taskRef) return 'task';
  return 'conversation';
}
