import type { ModuleMetadata, Provider, Type } from '@nestjs/common';
import type { SessionContext, Usage } from '@loom/session';
import type { AgentRegistration } from '../contracts/agent-descriptor';
import type { LlmClient } from '../llm/llm.types';

/** What the kit hands a handler besides its SessionContext. */
export interface AgentTools {
  /** The model; its calls carry `signal`, so they end when the execution is cancelled. */
  llm: LlmClient;
  language: 'zh' | 'en';
  /** Set when the user is streaming the reply: call it with each piece of text as it is produced. */
  onDelta?: (text: string) => void;
  /**
   * Aborts when the execution is cancelled: it ran AGENT_MAX_EXECUTION_MS on this agent, its
   * caller's deadline passed, or the agent is stopping past its drain. Pass it on to whatever
   * the handler awaits (`fetch(url, { signal })`, a driver's call) and stop when it aborts:
   * the execution then fails with `signal.reason`, a typed error, whatever the handler returns,
   * and a handler still running a second after it is no longer waited for (nothing it writes
   * after that is kept).
   */
  signal: AbortSignal;
}

/**
 * The one thing an agent app writes: how it answers, given its SessionContext. `answer` is
 * text, not blank, at most MAX_ANSWER_CHARS; anything else fails the execution (AGENT_FAILED).
 */
export interface AgentHandler {
  handle(
    ctx: SessionContext,
    tools: AgentTools,
  ): Promise<{ answer: string; usage: Usage; sharedKeysWritten?: string[] }>;
}

export const AGENT_HANDLER = Symbol('AGENT_HANDLER');
export const AGENT_DESCRIPTOR = Symbol('AGENT_DESCRIPTOR');

/**
 * A whole agent app: its `src/agent.ts` exports one as `AGENT`. Its own `main.ts` starts it as a
 * process; the embedded profile finds every `apps/<name>/src/agent` and starts them all in one.
 */
export interface AgentDefinition {
  descriptor: AgentRegistration;
  handler: Type<AgentHandler>;
  /** Modules the handler's own dependencies come from (an HTTP client, a database module…). */
  imports?: ModuleMetadata['imports'];
  /** Providers the handler injects (`constructor(private readonly rates: TaxRates)`). */
  providers?: Provider[];
}

export function isAgentDefinition(x: unknown): x is AgentDefinition {
  return typeof x === 'object' && x !== null && 'descriptor' in x && 'handler' in x;
}

/**
 * The `service` an agent's log lines carry: its own process's, and in the embedded profile (one
 * process for every app) that of each of its executions and heartbeats.
 */
export function agentService(agentType: string): string {
  return `${agentType}-agent`;
}
