import { INestMicroservice, Type } from '@nestjs/common';
import { randomBytes } from 'crypto';
import { firstValueFrom } from 'rxjs';
import {
  AgentDefinition,
  AgentHandler,
  AgentRegistration,
  agentExecutePattern,
  bootstrapAgent,
  ExecuteAgentResult,
  isAgentDefinition,
  parseEnv,
  RedisStreamsClient,
  sessionOptionsFrom,
} from '@loom/agent-kit';
import { AssignmentSigner } from '@loom/security';
import {
  ConversationRepository,
  createSessionInfra,
  newId,
  Owner,
  SessionInfra,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from './infra';

/**
 * One agent app in-process on real Redis and MySQL, reached through a real client proxy (Loom's
 * Redis Streams client), with the session data an orchestrator would have written.
 */
export class AgentHarness {
  private constructor(
    readonly agentType: string,
    readonly app: INestMicroservice,
    readonly client: RedisStreamsClient,
    readonly infra: SessionInfra,
    readonly conversations: ConversationRepository,
    readonly tasks: TaskRepository,
    readonly signer: AssignmentSigner,
    private readonly cleanup: () => Promise<void>,
  ) {}

  /** Starts an agent app's `AGENT` (its handler's own imports and providers included). */
  static start(agent: AgentDefinition, extraEnv?: Record<string, string>): Promise<AgentHarness>;
  static start(
    descriptor: AgentRegistration,
    handler: Type<AgentHandler>,
    /** Extra environment for the agent app (e.g. AGENT_CLAIM_IDLE_MS). */
    extraEnv?: Record<string, string>,
  ): Promise<AgentHarness>;
  static async start(
    first: AgentDefinition | AgentRegistration,
    second?: Type<AgentHandler> | Record<string, string>,
    third?: Record<string, string>,
  ): Promise<AgentHarness> {
    const agent: AgentDefinition = isAgentDefinition(first)
      ? first
      : { descriptor: first, handler: second as Type<AgentHandler> };
    const extraEnv = (isAgentDefinition(first) ? second : third) as
      Record<string, string> | undefined;
    const { descriptor } = agent;
    const db = await createTestDatabase('loom_agent');
    const prefix = createTestPrefix('loomagent');
    const secret = randomBytes(24).toString('hex');
    let app: INestMicroservice | undefined;
    let client: RedisStreamsClient | undefined;
    let infra: Awaited<ReturnType<typeof createSessionInfra>> | undefined;
    // A start that fails leaves the suite no harness to stop: the database and keys go here.
    try {
      const env = parseEnv({
        REDIS_URL: TEST_REDIS_URL,
        MYSQL_URL: db.url,
        LOOM_KEY_PREFIX: prefix.prefix,
        LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
        LOOM_AGENT_SECRET: secret,
        LOG_LEVEL: 'warn',
        ...(extraEnv ?? {}),
      });
      app = await bootstrapAgent(agent, env);
      client = new RedisStreamsClient({
        redisUrl: env.REDIS_URL,
        keyPrefix: env.LOOM_KEY_PREFIX,
        timeoutMs: 20_000,
      });
      infra = await createSessionInfra(sessionOptionsFrom(env));
    } catch (err) {
      await client?.close().catch(() => undefined);
      await app?.close().catch(() => undefined);
      await Promise.all([db.drop(), prefix.cleanup()]);
      throw err;
    }
    const conversations = new ConversationRepository(infra.store, { idleExpiryDays: 30 });
    const [started, rpc, session] = [app, client, infra];
    return new AgentHarness(
      descriptor.agentType,
      started,
      rpc,
      session,
      conversations,
      new TaskRepository(session.store),
      new AssignmentSigner(secret),
      async () => {
        await rpc.close();
        await started.close();
        await session.close();
        await Promise.all([db.drop(), prefix.cleanup()]);
      },
    );
  }

  /** A conversation with `history` (alternating user/assistant) and a RUNNING task for `question`. */
  async seed(owner: Owner, history: string[], question: string): Promise<TaskSession> {
    const { meta } = await this.conversations.create(owner);
    for (const [i, content] of history.entries()) {
      const role = i % 2 === 0 ? 'user' : 'assistant';
      await this.conversations.appendMessage(owner, meta.conversationId, {
        role,
        content,
        agentType: role === 'assistant' ? this.agentType : null,
        taskId: null,
        createdAt: new Date().toISOString(),
        tokens: 0,
      });
    }
    const user = await this.conversations.appendMessage(owner, meta.conversationId, {
      role: 'user',
      content: question,
      agentType: null,
      taskId: null,
      createdAt: new Date().toISOString(),
      tokens: 0,
    });
    const task: TaskSession = {
      taskId: newId('t'),
      conversationId: meta.conversationId,
      tenantId: owner.tenantId,
      userId: owner.userId,
      taskType: 'consultation',
      userIntent: question,
      intent: this.agentType,
      plan: [{ agentType: this.agentType, required: true, dependsOn: [] }],
      status: TaskStatus.RUNNING,
      executions: [],
      userSeq: user.seq,
      replySeq: null,
      idempotencyKey: null,
      lease: null,
      createdAt: new Date().toISOString(),
      completedAt: null,
      error: null,
    };
    await this.tasks.create(owner, task);
    return task;
  }

  /** A correctly signed request for `task`, as the orchestrator sends it. */
  request(
    owner: Owner,
    task: TaskSession,
    agentSessionId = newId('a'),
    language: 'zh' | 'en' = 'zh',
  ) {
    const assignment = this.signer.sign({
      ...owner,
      conversationId: task.conversationId,
      taskId: task.taskId,
      agentSessionId,
      agentType: this.agentType,
      expiresAt: Date.now() + 60_000,
    });
    return {
      assignment,
      meta: {
        correlationId: newId('r'),
        ...owner,
        conversationId: task.conversationId,
        taskId: task.taskId,
        agentType: this.agentType,
      },
      language,
    };
  }

  /** Sends through the real client proxy; resolves the result or rejects with the RPC error body. */
  execute(payload: unknown): Promise<ExecuteAgentResult> {
    return firstValueFrom(
      this.client.send<ExecuteAgentResult>(agentExecutePattern(this.agentType), payload),
    );
  }

  stop(): Promise<void> {
    return this.cleanup();
  }
}
