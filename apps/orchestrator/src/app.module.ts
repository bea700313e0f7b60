import { DynamicModule, Module } from '@nestjs/common';
import { JwtModule } from '@nestjs/jwt';
import { ScheduleModule } from '@nestjs/schedule';
import { TerminusModule } from '@nestjs/terminus';
import { createSecretKey, randomUUID } from 'crypto';
import { IncomingMessage, ServerResponse } from 'http';
import { ClsMiddlewareOptions, ClsModule, ClsService } from 'nestjs-cls';
import {
  AGENT_REGISTRY,
  createLlmClient,
  createRegistry,
  LLM_CLIENT,
  llmConfig,
  LOOM_ENV,
  LoomEnv,
  Planner,
  sessionOptionsFrom,
  requiredAgentSecret,
} from '@loom/agent-kit';
import {
  SESSION_INFRA,
  SessionInfra,
  SessionModule,
  SharedClock,
  SystemRepository,
} from '@loom/session';
import { AssignmentSigner } from '@loom/security';
import { AgentsController } from './agents/agents.controller';
import { JwtAuthGuard } from './auth/jwt-auth.guard';
import { TokenVerifier } from './auth/token-verifier';
import { ConversationsController } from './conversations/conversations.controller';
import { AgentDispatcher } from './dispatch/agent-dispatcher';
import { HealthController } from './health/health.controller';
import { ShutdownHandOver } from './lifecycle/shutdown-hand-over';
import { DispatchQueueGauges } from './metrics/dispatch-queue.gauges';
import { MetricsModule } from './metrics/metrics.module';
import { SecurityModule } from './security/security.module';
import { RecoveryScheduler } from './recovery/recovery.scheduler';
import { RecoverySignal } from './recovery/recovery-signal';
import { SessionSweeper } from './recovery/session-sweeper.service';
import { TaskRecovery } from './recovery/task-recovery.service';
import { TasksController } from './tasks/tasks.controller';
import { AgentCatalog } from './turn/agent-catalog';
import { HistoryMaintenance } from './turn/history-maintenance';
import { TaskCompletion } from './turn/task-completion';
import { TaskExecutor } from './turn/task-executor';
import { OrphanedUserMessage } from './turn/orphaned-user-message';
import { StaleLockHolder } from './turn/stale-lock-holder';
import { TaskResumer } from './turn/task-resumer';
import { TaskRetry } from './turn/task-retry';
import { orchestratorIdProvider, TaskLeases } from './turn/task-run';
import { TurnAdmission } from './turn/turn-admission';
import { MessageReadAdmission } from './conversations/message-read-admission';
import { TurnService } from './turn/turn.service';
import { localTokenSecret } from './security/local-token-secret';

/**
 * The embedded profile's built-in token secret of earlier versions, published in the source: no
 * longer used, and never taken for a secret of one's own (main.ts keeps to loopback with it).
 */
export const EMBEDDED_JWT_SECRET = 'embedded-profile-only-jwt-secret';

const CORRELATION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * Every request's CLS context: its correlation id (the client's `x-correlation-id` when
 * well-formed, else a new UUID), echoed. Mounted by bootstrap.ts as the first middleware, so a
 * request refused before routing (a malformed or oversized body, a wrong content type, a body
 * without a valid token) is answered with its id and gets its access-log line too.
 */
export const CLS_MIDDLEWARE: ClsMiddlewareOptions = {
  generateId: true,
  idGenerator: (req: IncomingMessage) => {
    const given = req.headers['x-correlation-id'];
    return typeof given === 'string' && CORRELATION_ID.test(given) ? given : randomUUID();
  },
  setup: (cls: ClsService, _req: IncomingMessage, res: ServerResponse) => {
    cls.set('correlationId', cls.getId());
    res.setHeader('x-correlation-id', cls.getId());
  },
};

@Module({})
export class AppModule {
  static forRoot(env: LoomEnv): DynamicModule {
    return {
      module: AppModule,
      imports: [
        // The request's context is opened by bootstrap.ts, before any other middleware.
        ClsModule.forRoot({ global: true, middleware: { mount: false } }),
        SessionModule.forRootAsync({ useFactory: () => sessionOptionsFrom(env) }),
        JwtModule.register({
          // A KeyObject made once: given a string, jsonwebtoken first tries (and fails) to parse
          // it as a public key on every request, which cost more than the rest of verification.
          secretOrKeyProvider: jwtKey(env.LOOM_JWT_SECRET ?? localTokenSecret(env.LOOM_DATA_DIR)),
          verifyOptions: { algorithms: ['HS256'] },
        }),
        // Its own "Health Check has failed!" error on every failing poll is left out: the
        // HealthController says a change of readiness once (see its `report`).
        TerminusModule.forRoot({ logger: false }),
        SecurityModule.forRoot(env),
        ScheduleModule.forRoot(),
        MetricsModule.forRoot(env),
      ],
      controllers: [ConversationsController, TasksController, AgentsController, HealthController],
      providers: [
        { provide: LOOM_ENV, useValue: env },
        {
          provide: LLM_CLIENT,
          useFactory: () => createLlmClient(llmConfig(env)),
        },
        { provide: AGENT_REGISTRY, useFactory: () => createRegistry(env) },
        {
          provide: AssignmentSigner,
          useFactory: (clock: SharedClock) => new AssignmentSigner(requiredAgentSecret(env), clock),
          inject: [SharedClock],
        },
        Planner,
        AgentDispatcher,
        TaskExecutor,
        HistoryMaintenance,
        TurnService,
        TurnAdmission,
        MessageReadAdmission,
        TokenVerifier,
        JwtAuthGuard,
        // Leases, recovery and cleanup (docs/recovery.md).
        {
          provide: SystemRepository,
          useFactory: (infra: SessionInfra) => new SystemRepository(infra.store),
          inject: [SESSION_INFRA],
        },
        orchestratorIdProvider,
        TaskLeases,
        AgentCatalog,
        TaskCompletion,
        TaskResumer,
        TaskRetry,
        OrphanedUserMessage,
        StaleLockHolder,
        TaskRecovery,
        SessionSweeper,
        RecoverySignal,
        RecoveryScheduler,
        ShutdownHandOver,
        // Read when /metrics is scraped (docs/metrics.md).
        DispatchQueueGauges,
      ],
    };
  }
}

function jwtKey(secret: string) {
  const key = createSecretKey(Buffer.from(secret, 'utf8'));
  return () => key;
}
