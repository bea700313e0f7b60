import { INestApplication, INestMicroservice, Type } from '@nestjs/common';
import { createHash, randomBytes } from 'crypto';
import { Server } from 'http';
import { AddressInfo, connect } from 'net';
import { LoomEnv, parseEnv } from '@loom/agent-kit';
import {
  AgentExecutionRecord,
  ConversationMessage,
  ConversationRepository,
  ExecutionStatus,
  Owner,
  TaskRepository,
  TaskSession,
  TaskStatus,
} from '@loom/session';
import { createTestDatabase, createTestPrefix, TEST_REDIS_URL } from '@loom/testing';
import { createOrchestrator } from '../src/bootstrap';
const { signJwt } = require('../../../scripts/lib/processes');

/** The e2e suites' orchestrator in-process (supertest), on a database and key prefix of its own. */
export interface InProcessOrchestrator {
  app: INestApplication;
  env: LoomEnv;
  /** An Authorization header for this user of this tenant. */
  auth(sub: string, tid: string): string;
  /** A provider of the app, wherever its module is. */
  get<T>(token: Type<T> | string | symbol): T;
  /** Closes the app and its agents, drops the database and deletes the keys. */
  close(): Promise<void>;
}

/**
 * Starts an orchestrator on a new database (`loom_<name>`) and key prefix (`loom<name>`), with
 * random JWT and agent secrets. `env` adds to or overrides its settings; `agents` starts agents
 * (on the same env) before the orchestrator.
 */
export async function startInProcessOrchestrator(
  name: string,
  options: {
    env?: Record<string, string>;
    agents?: (env: LoomEnv) => Promise<INestMicroservice[]>;
  } = {},
): Promise<InProcessOrchestrator> {
  const db = await createTestDatabase(`loom_${name}`);
  const prefix = createTestPrefix(`loom${name}`);
  const agents: INestMicroservice[] = [];
  let app: INestApplication | undefined;
  let env: LoomEnv;
  // A start that fails leaves the suite nothing to close: the database and keys go with it here.
  try {
    env = parseEnv({
      REDIS_URL: TEST_REDIS_URL,
      MYSQL_URL: db.url,
      LOOM_KEY_PREFIX: prefix.prefix,
      LOOM_JWT_SECRET: randomBytes(24).toString('hex'),
      LOOM_AGENT_SECRET: randomBytes(24).toString('hex'),
      LOG_LEVEL: 'warn',
      ...options.env,
    });
    if (options.agents) agents.push(...(await options.agents(env)));
    app = await createOrchestrator(env);
    await app.init();
  } catch (err) {
    await app?.close().catch(() => undefined);
    for (const agent of agents) await agent.close().catch(() => undefined);
    await Promise.all([db.drop(), prefix.cleanup()]);
    throw err;
  }
  const started = app;
  return {
    app: started,
    env,
    auth: (sub, tid) => `Bearer ${signJwt({ sub, tid }, env.LOOM_JWT_SECRET)}`,
    get: <T>(token: Type<T> | string | symbol) => started.get<T>(token, { strict: false }),
    close: async () => {
      await started.close();
      for (const agent of agents) await agent.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    },
  };
}

/** As TurnService hashes an Idempotency-Key and its message. */
export const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 40);

/** A turn TurnService accepted: its question, asked under an Idempotency-Key, and its task's id. */
export interface AcceptedTurn {
  owner: Owner;
  conversationId: string;
  taskId: string;
  question: string;
  key: string;
  userSeq: number;
}

/** What TurnService writes when it accepts a turn: the user's message and its key's record. */
export async function storeAcceptedTurn(
  orch: InProcessOrchestrator,
  owner: Owner,
  conversationId: string,
  turn: Pick<AcceptedTurn, 'taskId' | 'question' | 'key'>,
): Promise<AcceptedTurn> {
  const user = await orch.get(ConversationRepository).appendMessage(owner, conversationId, {
    role: 'user',
    content: turn.question,
    agentType: null,
    taskId: turn.taskId,
    createdAt: new Date().toISOString(),
    tokens: 0,
  });
  await orch.get(TaskRepository).rememberIdempotent(owner, conversationId, sha(turn.key), {
    taskId: turn.taskId,
    requestHash: sha(turn.question),
    userSeq: user.seq,
  });
  return { ...turn, owner, conversationId, userSeq: user.seq };
}

/**
 * The stored task of a turn asked of one required specialist. `fields` holds what the test is
 * about: status and executions always, lease and the rest where it sets them.
 */
export function taskFixture(
  turn: AcceptedTurn,
  agentType: string,
  fields: Pick<TaskSession, 'status' | 'executions'> & Partial<TaskSession>,
): TaskSession {
  return {
    taskId: turn.taskId,
    conversationId: turn.conversationId,
    tenantId: turn.owner.tenantId,
    userId: turn.owner.userId,
    taskType: 'consultation',
    userIntent: turn.question,
    intent: agentType,
    plan: [{ agentType, required: true, dependsOn: [] }],
    userSeq: turn.userSeq,
    replySeq: null,
    idempotencyKey: sha(turn.key),
    lease: null,
    createdAt: new Date().toISOString(),
    completedAt: null,
    error: null,
    ...fields,
  };
}

/** A stored execution record, dispatched once and shown nothing; `fields` sets its outcome. */
export function executionFixture(
  agentSessionId: string,
  agentType: string,
  fields: Pick<AgentExecutionRecord, 'status'> & Partial<AgentExecutionRecord>,
): AgentExecutionRecord {
  return {
    agentSessionId,
    agentType,
    attempts: 1,
    startedAt: new Date().toISOString(),
    completedAt: null,
    error: null,
    context: { historyMessages: 0, summaryIncluded: false, sharedKeys: [] },
    output: null,
    usage: { promptTokens: 0, completionTokens: 0, costUsd: 0 },
    ...fields,
  };
}

/**
 * A turn whose orchestrator died after it stored the reply and before it closed the task: a new
 * conversation of `owner` holding the accepted turn, its task RUNNING under a lapsed lease with
 * one execution of a required `agentType` still RUNNING (`agentSessionId`), listed as active,
 * and the reply. A same-key retry resumes it.
 */
export async function storeTurnDeadAfterReply(
  orch: InProcessOrchestrator,
  owner: Owner,
  turn: Pick<AcceptedTurn, 'taskId' | 'question' | 'key'> & {
    agentType: string;
    agentSessionId: string;
    reply: string;
  },
): Promise<{ accepted: AcceptedTurn; reply: ConversationMessage }> {
  const conversations = orch.get(ConversationRepository);
  const { meta } = await conversations.create(owner);
  const id = meta.conversationId;
  const accepted = await storeAcceptedTurn(orch, owner, id, turn);
  const task = taskFixture(accepted, turn.agentType, {
    status: TaskStatus.RUNNING,
    executions: [
      executionFixture(turn.agentSessionId, turn.agentType, { status: ExecutionStatus.RUNNING }),
    ],
    lease: { owner: 'orchestrator-dead', expiresAt: new Date(Date.now() - 1000).toISOString() },
  });
  await orch.get(TaskRepository).create(owner, task);
  await conversations.save(owner, { ...meta, activeTaskIds: [turn.taskId] });
  // Its last write: the reply. It died before the conversation update and the completion.
  const reply = await conversations.appendMessage(owner, id, {
    role: 'assistant',
    content: turn.reply,
    agentType: turn.agentType,
    taskId: turn.taskId,
    createdAt: new Date().toISOString(),
    tokens: 0,
  });
  return { accepted, reply };
}

/**
 * Sends `text` as is on a socket of its own to the app's HTTP server (listening on a free port
 * once asked), and resolves with all it answered once it closes, or what came in 5 s.
 */
export async function rawHttp(app: INestApplication, text: string): Promise<string> {
  const server = app.getHttpServer() as Server;
  if (!server.listening) await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return new Promise<string>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(text));
    let got = '';
    socket.on('data', (d) => (got += d.toString()));
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(5000, () => (socket.destroy(), resolve(got)));
  });
}
