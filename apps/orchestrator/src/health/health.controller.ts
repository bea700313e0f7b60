import { Controller, Get, Inject, Logger, Res, ServiceUnavailableException } from '@nestjs/common';
import { Response } from 'express';
import { ApiServiceUnavailableResponse, ApiTags } from '@nestjs/swagger';
import {
  HealthCheck,
  HealthCheckResult,
  HealthCheckService,
  HealthIndicatorService,
} from '@nestjs/terminus';
import {
  pingRedis,
  queryWithin,
  SESSION_INFRA,
  SessionInfra,
  SYSTEM_TENANT,
  SystemSessions,
} from '@loom/session';
import { ApiErrors } from '../openapi/api-errors.decorator';
import { markExpectedFailure } from '../security/request-log.middleware';

/** How long a store may take to answer the probe before it counts as down (ms). */
const PROBE_TIMEOUT_MS = 1000;

/**
 * A check's result answers every poll that comes while it runs and for so long after it (ms):
 * /health is unauthenticated and not rate-limited (a load balancer must never be locked out), so
 * a flood of polls costs the stores one check a second, not one round trip each. A change of
 * readiness shows within it.
 */
export const HEALTH_RESULT_TTL_MS = 1000;

/** What one check found: terminus's result, or its report of what is down. */
type Outcome =
  | { ready: true; result: HealthCheckResult }
  | { ready: false; report: { error?: Record<string, unknown> } };

interface ProbeRow {
  readOnly: unknown;
  innodbReadOnly: unknown;
}

const readOnly = (row: ProbeRow | undefined) =>
  Boolean(Number(row?.readOnly) || Number(row?.innodbReadOnly));

/** A store that answers but could not serve a turn: down, saying why. */
class NotServing extends Error {}

/**
 * The session table (an unmigrated database is not ready), and whether the server takes writes:
 * one that is read-only (a replica after a failover, a primary set read_only for maintenance,
 * InnoDB started read-only) answers reads while every turn fails with 503.
 */
const MYSQL_PROBE =
  'SELECT @@global.read_only AS readOnly, @@innodb_read_only AS innodbReadOnly, ' +
  'EXISTS(SELECT 1 FROM loom_session_state) AS migrated';

/**
 * 200 when the stores answer, else 503: MySQL (migrated, taking writes) and Redis (distributed),
 * or the JSON-file store (embedded, which uses neither and does not claim them).
 */
@ApiTags('health')
@Controller('health')
export class HealthController {
  private readonly log = new Logger('Health');
  /** Whether the last poll found this process not ready: a change of it is logged, once. */
  private down = false;
  /** The check polls share: running (no `settledAt` yet) or settled at `settledAt`. */
  private shared?: { outcome: Promise<Outcome>; settledAt?: number };

  constructor(
    private readonly health: HealthCheckService,
    private readonly indicator: HealthIndicatorService,
    @Inject(SESSION_INFRA) private readonly infra: SessionInfra,
  ) {}

  @Get()
  @ApiErrors(400)
  @ApiServiceUnavailableResponse({
    description:
      "A store does not answer, or MySQL refuses writes: API.md's error body, with terminus's report of which",
    schema: {
      type: 'object',
      required: ['statusCode', 'code', 'message', 'status', 'details'],
      properties: {
        statusCode: { type: 'number', example: 503 },
        code: { type: 'string', example: 'UNAVAILABLE' },
        message: { type: 'string', example: 'a backing store does not answer' },
        status: { type: 'string', example: 'error' },
        info: { type: 'object', additionalProperties: true, nullable: true },
        error: { type: 'object', additionalProperties: true, nullable: true },
        details: { type: 'object', additionalProperties: true },
      },
    },
  })
  @HealthCheck()
  async check(@Res({ passthrough: true }) res: Response) {
    const outcome = await this.outcome();
    if (outcome.ready) return outcome.result;
    // Polled every few seconds through an outage: each failing poll is a warning in the access
    // log, the outage itself one error (report).
    markExpectedFailure(res);
    // API.md's error shape, with terminus's report of what is down.
    res.status(503);
    return {
      statusCode: 503,
      code: 'UNAVAILABLE',
      message: 'a backing store does not answer, or refuses writes',
      ...outcome.report,
    };
  }

  /** The running check's outcome, or the last one's if at most HEALTH_RESULT_TTL_MS old, else a new one's. */
  private outcome(): Promise<Outcome> {
    const last = this.shared;
    if (
      last &&
      (last.settledAt === undefined || Date.now() - last.settledAt < HEALTH_RESULT_TTL_MS)
    )
      return last.outcome;
    const next: { outcome: Promise<Outcome>; settledAt?: number } = { outcome: this.run() };
    this.shared = next;
    next.outcome.then(
      () => (next.settledAt = Date.now()),
      // An unexpected error is not shared past its own polls: the next poll checks again.
      () => this.shared === next && (this.shared = undefined),
    );
    return next.outcome;
  }

  private async run(): Promise<Outcome> {
    try {
      const result = await this.health.check(this.indicators());
      this.report(null);
      return { ready: true, result };
    } catch (err) {
      if (!(err instanceof ServiceUnavailableException)) throw err;
      const report = err.getResponse() as { error?: Record<string, unknown> };
      this.report(report.error ?? {});
      return { ready: false, report };
    }
  }

  /**
   * Logs a change of readiness, not every poll: the first failing one as an error naming what
   * is down (`failing`), and the first one to pass after it. A load balancer polling through an
   * outage would otherwise add an error line every few seconds to one already reported.
   */
  private report(failing: Record<string, unknown> | null): void {
    if (failing && !this.down)
      this.log.error({ msg: 'not ready: a backing store is down', down: failing });
    else if (!failing && this.down) this.log.log('ready again: every backing store answers');
    this.down = failing !== null;
  }

  private indicators() {
    if (!this.infra.dataSource)
      return [
        () =>
          this.probe(this.infra.store.kind, () =>
            this.infra.store.exists({ tenantId: SYSTEM_TENANT }, SystemSessions.catalog),
          ),
      ];
    return [
      () =>
        this.probe('mysql', async () => {
          if (!this.infra.dataSource) return;
          // Bounded by the probe's own time-out, after which its connection is closed: one
          // left waiting on a server that stopped answering would hold its place in the pool.
          // So is one that found its server read-only, as the store's are: after a failover
          // that left the former primary up, a new one reaches the new primary.
          const [row] = await queryWithin<ProbeRow[]>(
            this.infra.dataSource,
            MYSQL_PROBE,
            [],
            PROBE_TIMEOUT_MS,
            ([answer]) => readOnly(answer),
          );
          if (readOnly(row))
            throw new NotServing('read-only: the server refuses writes (read_only=ON)');
        }),
      () => this.probe('redis', () => (this.infra.redis ? pingRedis(this.infra.redis) : undefined)),
    ];
  }

  private async probe(name: string, fn: () => Promise<unknown> | undefined) {
    const indicator = this.indicator.check(name);
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        fn(),
        new Promise(
          (_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), PROBE_TIMEOUT_MS)),
        ),
      ]);
      return indicator.up({ ms: Date.now() - started });
    } catch (err) {
      return err instanceof NotServing ? indicator.down({ reason: err.message }) : indicator.down();
    } finally {
      clearTimeout(timer);
    }
  }
}
