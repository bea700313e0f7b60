import { DynamicModule, Global, Inject, Module, OnApplicationShutdown } from '@nestjs/common';
import { DEFAULT_SESSION_OPTIONS, SESSION_OPTIONS, SessionOptions } from './config/session-options';
import { ConversationRepository } from './conversation/conversation.repository';
import { TaskRepository } from './conversation/task.repository';
import { SharedAclRules, SharedContextAcl, StoreAuditLog } from './context/shared-acl';
import { ConversationLock } from './lock/conversation-lock';
import { SharedClock } from './clock/shared-clock';
import { createSessionInfra, SessionInfra } from './session.providers';

export const SESSION_INFRA = Symbol('SESSION_INFRA');

export interface SessionModuleAsyncOptions {
  imports?: DynamicModule['imports'];
  inject?: Array<string | symbol | (abstract new (...args: never[]) => unknown)>;
  /** Every option left out is DEFAULT_SESSION_OPTIONS's, as with createSessionInfra. */
  useFactory: (...args: any[]) => SessionModuleOptions | Promise<SessionModuleOptions>;
}

export type SessionModuleOptions = Partial<SessionOptions> & {
  acl?: SharedAclRules;
  /** Applied to task-shared values before they are stored (LOOM_REDACT_STORED). */
  redactShared?: (value: unknown) => unknown;
  onHotError?: (err: unknown) => void;
};

/** The session library for a Nest app: the store of its profile, repositories, lock and ACL. */
@Global()
@Module({})
export class SessionModule implements OnApplicationShutdown {
  constructor(@Inject(SESSION_INFRA) private readonly infra: SessionInfra) {}

  static forRootAsync(opts: SessionModuleAsyncOptions): DynamicModule {
    return {
      module: SessionModule,
      imports: opts.imports ?? [],
      providers: [
        {
          provide: SESSION_OPTIONS,
          useFactory: async (...args: unknown[]) => ({
            ...DEFAULT_SESSION_OPTIONS,
            ...(await opts.useFactory(...args)),
          }),
          inject: opts.inject ?? [],
        },
        {
          provide: SESSION_INFRA,
          useFactory: (o: SessionOptions & { onHotError?: (err: unknown) => void }) =>
            createSessionInfra(o, o.onHotError),
          inject: [SESSION_OPTIONS],
        },
        {
          provide: ConversationRepository,
          useFactory: (infra: SessionInfra, o: SessionOptions, clock: SharedClock) =>
            new ConversationRepository(infra.store, { idleExpiryDays: o.idleExpiryDays, clock }),
          inject: [SESSION_INFRA, SESSION_OPTIONS, SharedClock],
        },
        {
          provide: TaskRepository,
          useFactory: (infra: SessionInfra) => new TaskRepository(infra.store),
          inject: [SESSION_INFRA],
        },
        {
          provide: ConversationLock,
          useFactory: (infra: SessionInfra, o: SessionOptions) =>
            new ConversationLock(infra.redis, infra.keys, infra.store, {
              ttlMs: o.lockTtlMs,
              waitMs: o.lockWaitMs,
            }),
          inject: [SESSION_INFRA, SESSION_OPTIONS],
        },
        {
          // Read once before the app starts, so that the first lease or deadline is on it.
          provide: SharedClock,
          useFactory: async (infra: SessionInfra) => {
            const clock = new SharedClock(infra.redis);
            await clock.sync();
            return clock;
          },
          inject: [SESSION_INFRA],
        },
        {
          provide: SharedContextAcl,
          useFactory: (
            o: { acl?: SharedAclRules; redactShared?: (value: unknown) => unknown },
            infra: SessionInfra,
          ) =>
            new SharedContextAcl(o.acl ?? {}, {
              audit: new StoreAuditLog(infra.store),
              redactValue: o.redactShared,
            }),
          inject: [SESSION_OPTIONS, SESSION_INFRA],
        },
      ],
      exports: [
        SESSION_OPTIONS,
        SESSION_INFRA,
        ConversationRepository,
        TaskRepository,
        ConversationLock,
        SharedClock,
        SharedContextAcl,
      ],
    };
  }

  async onApplicationShutdown(): Promise<void> {
    await this.infra.close();
  }
}
