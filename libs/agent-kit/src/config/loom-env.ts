import { plainToInstance, Transform } from 'class-transformer';
import { randomBytes } from 'crypto';
import {
  IsBoolean,
  IsIn,
  IsInt,
  IsNumber,
  IsOptional,
  IsString,
  Matches,
  Max,
  Min,
  MinLength,
  validateSync,
} from 'class-validator';
import { redactedReason } from '@loom/security';
import type { LlmConfig } from '../llm/llm.factory';
import {
  messagesReadPerTenant,
  messagesReadPerUser,
  turnsPerTenant,
  turnsPerUser,
} from './admission-shares';
import {
  ClusterNatMap,
  mysqlConnectionConfig,
  parseClusterNatMap,
  parseClusterNodes,
  parseSharedAclRules,
  RedisTarget,
  SharedAclRules,
} from '@loom/session';

/**
 * Decimal text (`8080`, ` 0.5 `, `.5`, `+1`, as Number() read it) as a number; anything else,
 * blanks, `1e3` and `0x10` included, as NaN, which the type rule refuses (`Number('  ')` is 0: a
 * blank timeout would have been 0 ms).
 */
const toNumber = ({ value }: { value: unknown }) => {
  if (value === undefined || value === '') return undefined;
  const text = String(value).trim();
  return /^[+-]?(\d+\.?\d*|\.\d+)$/.test(text) ? Number(text) : NaN;
};
/** The same conversion; @IsInt() then refuses a fraction. */
const toInt = toNumber;
/** true/false/1/0 in any case; anything else stays a string, which @IsBoolean() refuses. */
const toBool = ({ value }: { value: unknown }) => {
  if (value === undefined || value === '') return undefined;
  const word = String(value).trim().toLowerCase();
  return word === 'true' || word === '1' ? true : word === 'false' || word === '0' ? false : value;
};
/**
 * The longest time setting: a day. Node fires a timer past 2^31-1 ms (about 24.8 days) at once,
 * and some settings are waited for with a margin added (AGENT_TIMEOUT_MS + 1 s).
 */
const MAX_TIMER_MS = 86_400_000;
/**
 * Unset AGENT_MAX_EXECUTION_MS: one model answer may stream for 10 min after a start of up to
 * LLM_TIMEOUT_MS × attempts; 15 min leaves room for the rest of an execution.
 */
const DEFAULT_AGENT_MAX_EXECUTION_MS = 900_000;
/** A value of the wrong type breaks its range rules too; only the type is worth naming. */
const TYPE_RULES = ['isInt', 'isNumber', 'isBoolean', 'isString'];

/** API.md's environment table, validated once at boot; nothing else reads process.env. */
export class LoomEnv {
  @IsIn(['distributed', 'embedded']) LOOM_PROFILE: 'distributed' | 'embedded' = 'distributed';
  @Matches(/^rediss?:\/\//) REDIS_URL = 'redis://127.0.0.1:6379';
  /** `host:port,host:port`: seeds of a Redis Cluster; REDIS_URL then gives credentials and TLS. */
  @IsOptional() @IsString() REDIS_CLUSTER_NODES?: string;
  /** REDIS_CLUSTER_NODES as a list (empty: standalone Redis at REDIS_URL), set by parseEnv. */
  redisClusterNodes: string[] = [];
  /** `announced=reachable` pairs of `host:port`: where the cluster's nodes are reached behind NAT. */
  @IsOptional() @IsString() REDIS_CLUSTER_NAT_MAP?: string;
  /** REDIS_CLUSTER_NAT_MAP as ioredis' natMap (undefined: none), set by parseEnv. */
  redisClusterNatMap?: ClusterNatMap;
  /** Its one query option is mysql2's `ssl` (mysqlConnectionConfig, checked in parseEnv). */
  @Matches(/^mysql:\/\/[^/]+\/[A-Za-z0-9_$-]{1,64}(\?.*)?$/, {
    message: 'MYSQL_URL must look like mysql://user[:pass]@host:port/database[?ssl=…]',
  })
  MYSQL_URL = 'mysql://root@127.0.0.1:3306/loom';
  /** A PEM file of the CA that signed the MySQL server's certificate; turns TLS on. */
  @IsOptional() @IsString() MYSQL_SSL_CA?: string;
  @Matches(/^[A-Za-z0-9_.:-]{1,64}$/) LOOM_KEY_PREFIX = 'loom:';
  /** Needed by the orchestrator (it verifies API tokens), not by agents: see parseEnv. */
  @IsOptional()
  @IsString()
  @MinLength(16)
  LOOM_JWT_SECRET?: string;
  /** Needed by the orchestrator and every agent (assignments): see parseEnv. */
  @IsOptional()
  @IsString()
  @MinLength(16)
  LOOM_AGENT_SECRET?: string;
  @Transform(toInt) @IsInt() @Min(0) @Max(65535) PORT = 3000;
  @IsOptional() @IsIn(['offline', 'openai']) LLM_PROVIDER?: 'offline' | 'openai';
  @IsOptional() @IsString() OPENAI_BASE_URL?: string;
  @IsOptional() @IsString() OPENAI_API_KEY?: string;
  @IsOptional() @IsString() LLM_MODEL?: string;
  @Transform(toInt) @IsInt() @Min(0) @Max(600_000) LLM_OFFLINE_DELAY_MS = 0;
  /** Per attempt of an `openai` call; with the retries, keep it within AGENT_TIMEOUT_MS. */
  @Transform(toInt) @IsInt() @Min(100) @Max(600_000) LLM_TIMEOUT_MS = 30_000;
  /** Retries of a connection error, 408/409/429 or 5xx (the SDK's backoff between them). */
  @Transform(toInt) @IsInt() @Min(0) @Max(10) LLM_MAX_RETRIES = 2;
  /** USD per million prompt / completion tokens of LLM_MODEL, for usage.costUsd (0: not priced). */
  @Transform(toNumber) @IsNumber() @Min(0) @Max(10_000) LLM_PROMPT_USD_PER_MTOK = 0;
  @Transform(toNumber) @IsNumber() @Min(0) @Max(10_000) LLM_COMPLETION_USD_PER_MTOK = 0;
  @Transform(toInt) @IsInt() @Min(1000) @Max(MAX_TIMER_MS) TASK_LEASE_MS = 600_000;
  @Transform(toInt) @IsInt() @Min(100) @Max(MAX_TIMER_MS) RECOVERY_INTERVAL_MS = 30_000;
  /**
   * Orchestrator, on SIGTERM: how long it waits for its running turns before handing the rest
   * over to another replica; its leases end by then (plus a margin) even if it is killed first.
   */
  @Transform(toInt) @IsInt() @Min(0) @Max(MAX_TIMER_MS) SHUTDOWN_HANDOVER_MS = 20_000;
  /** The longest a turn waits for an agent without a sign of life (queue wait included). */
  @Transform(toInt) @IsInt() @Min(100) @Max(MAX_TIMER_MS) AGENT_TIMEOUT_MS = 120_000;
  /**
   * The longest a turn waits for one agent execution that keeps showing signs of life; at least
   * AGENT_TIMEOUT_MS (unset: 15 min, or AGENT_TIMEOUT_MS when that is longer).
   */
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(100)
  @Max(MAX_TIMER_MS)
  AGENT_MAX_EXECUTION_MS!: number;
  /** A request pending this long on an agent instance that stopped answering is handed to another. */
  @Transform(toInt) @IsInt() @Min(200) @Max(MAX_TIMER_MS) AGENT_CLAIM_IDLE_MS = 30_000;
  /** Deliveries of one request before it is dead-lettered and its task failed. */
  @Transform(toInt) @IsInt() @Min(1) @Max(100) AGENT_MAX_DELIVERIES = 5;
  /**
   * Agents: a dead-letter copy (the request's ids, not its data) is kept this long at most; a
   * minute at least, a year at most. Default 7 days.
   */
  @Transform(toInt)
  @IsInt()
  @Min(60_000)
  @Max(365 * 86_400_000)
  AGENT_DEAD_LETTER_RETENTION_MS = 7 * 86_400_000;
  /**
   * Orchestrator: a streamed turn (SSE) sends a comment this often until it ends, so a proxy or
   * load balancer that cuts idle connections keeps it while the turn waits (lock, agents, model).
   */
  @Transform(toInt) @IsInt() @Min(100) @Max(MAX_TIMER_MS) SSE_KEEPALIVE_MS = 15_000;
  /**
   * Orchestrator: an answer whose bytes the client has not taken for this long (it reads nothing,
   * its window stays shut) has its connection closed, so a client that never reads cannot hold a
   * socket and the answer's memory for good. A connection with nothing left to send is not cut.
   */
  @Transform(toInt) @IsInt() @Min(100) @Max(MAX_TIMER_MS) HTTP_SEND_TIMEOUT_MS = 60_000;
  /**
   * Orchestrator: open HTTP connections (Node's server.maxConnections); one more is closed at
   * once, unanswered, so idle or slow connections cannot exhaust file descriptors and memory.
   */
  @Transform(toInt) @IsInt() @Min(1) @Max(1_000_000) HTTP_MAX_CONNECTIONS = 4096;
  /**
   * Orchestrator: of those, the connections open from one remote address; one more is closed at
   * once, so one address cannot take them all. At most HTTP_MAX_CONNECTIONS; unset: half of it
   * (rounded up).
   */
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(1)
  @Max(1_000_000)
  HTTP_MAX_CONNECTIONS_PER_ADDRESS!: number;
  /**
   * Orchestrator: turns (JSON or streamed) this process runs or queues at once; one more is
   * refused at once with 503 UNAVAILABLE and Retry-After rather than held while agents lag.
   */
  @Transform(toInt) @IsInt() @Min(1) @Max(100_000) LOOM_MAX_TURNS_IN_FLIGHT = 200;
  /**
   * Orchestrator: of those, the turns of one conversation (they run one at a time, under its
   * lock); one more is 409 CONFLICT at once, so one conversation cannot take every slot.
   */
  @Transform(toInt) @IsInt() @Min(1) @Max(100_000) LOOM_MAX_TURNS_PER_CONVERSATION = 4;
  /**
   * Orchestrator: of those, the turns of one tenant; one more is 503 UNAVAILABLE at once, so one
   * tenant cannot take every slot from the others. Unset: half of LOOM_MAX_TURNS_IN_FLIGHT
   * (rounded up).
   */
  @IsOptional() @Transform(toInt) @IsInt() @Min(1) @Max(100_000) LOOM_MAX_TURNS_PER_TENANT?: number;
  /**
   * Orchestrator: of a tenant's, the turns of one of its users; one more is 503 UNAVAILABLE at
   * once, so one user cannot take the tenant's whole share from its other users. Unset: half of
   * the tenant's share (rounded up); never more than it.
   */
  @IsOptional() @Transform(toInt) @IsInt() @Min(1) @Max(100_000) LOOM_MAX_TURNS_PER_USER?: number;
  /**
   * Orchestrator: messages the pages of GET …/messages being read or sent at once may hold, each page
   * counting its limit (a page of 200 long replies is tens of MB); one more page is refused at
   * once with 503 UNAVAILABLE and Retry-After. At least 200, the largest page.
   */
  @Transform(toInt) @IsInt() @Min(200) @Max(1_000_000) LOOM_MAX_MESSAGES_READ_IN_FLIGHT = 1000;
  /**
   * Orchestrator: of those, the messages one tenant's pages may hold, so a few large pages of one
   * tenant do not refuse every other tenant's reads. Unset: half of
   * LOOM_MAX_MESSAGES_READ_IN_FLIGHT (rounded up), and at least 200, the largest page.
   */
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(200)
  @Max(1_000_000)
  LOOM_MAX_MESSAGES_READ_PER_TENANT?: number;
  /**
   * Orchestrator: of a tenant's, the messages one of its users' pages may hold. Unset: half of
   * the tenant's share (rounded up), and at least 200, the largest page; never more than it.
   */
  @IsOptional()
  @Transform(toInt)
  @IsInt()
  @Min(200)
  @Max(1_000_000)
  LOOM_MAX_MESSAGES_READ_PER_USER?: number;
  @IsIn(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']) LOG_LEVEL = 'info';
  @IsIn(['json', 'pretty']) LOG_FORMAT: 'json' | 'pretty' = 'json';
  @Transform(toBool) @IsBoolean() DB_MIGRATIONS_RUN = true;
  /** MySQL connections per process (several replicas share one server's max_connections). */
  @Transform(toInt) @IsInt() @Min(1) @Max(200) DB_POOL_SIZE = 10;
  /** A statement MySQL has not answered in this long fails with 503 UNAVAILABLE. */
  @Transform(toInt) @IsInt() @Min(100) @Max(600_000) DB_QUERY_TIMEOUT_MS = 10_000;
  /** Each step of the start (database, pool, migration lock, migrations) MySQL may take this long. */
  @Transform(toInt) @IsInt() @Min(1000) @Max(MAX_TIMER_MS) DB_START_TIMEOUT_MS = 60_000;
  @IsString() LOOM_DATA_DIR = '.loom-data';
  /** Embedded profile: the first agent's TCP port, the next ones' after it (0 = any free ports). */
  @Transform(toInt) @IsInt() @Min(0) @Max(65535) AGENT_PORT = 0;
  /** Shared-context ACL: JSON `{ "<taskType>|*": { "<key>": ["<agentType>", …] } }` (docs/security.md). */
  @IsOptional() @IsString() LOOM_SHARED_ACL?: string;
  /** Redact PII from user messages and task-shared values before they are stored. */
  @Transform(toBool) @IsBoolean() LOOM_REDACT_STORED = false;
  /** Requests per tenant per window on the HTTP API (0 turns rate limiting off). */
  @Transform(toInt) @IsInt() @Min(0) LOOM_RATE_LIMIT_PER_MINUTE = 600;
  /** The rate-limit window (ms); one minute unless a test needs a shorter one. */
  @Transform(toInt) @IsInt() @Min(100) @Max(MAX_TIMER_MS) LOOM_RATE_LIMIT_WINDOW_MS = 60_000;
  /** API tokens must carry `exp` and expire within this many seconds from now (0: any, or none). */
  @Transform(toInt) @IsInt() @Min(0) LOOM_JWT_MAX_AGE_S = 0;
  /** Orchestrator: serve GET /metrics (Prometheus text format); false answers it 404. */
  @Transform(toBool) @IsBoolean() LOOM_METRICS = true;
  /**
   * Orchestrator: when set, GET /metrics needs `Authorization: Bearer <this>` (a scraper's
   * secret, visible ASCII so it fits the header as it is); unset, /metrics is open like /health.
   */
  @IsOptional()
  @IsString()
  @MinLength(16)
  @Matches(/^[\x21-\x7e]+$/, { message: 'LOOM_METRICS_TOKEN must be visible ASCII characters' })
  LOOM_METRICS_TOKEN?: string;
  /** LOOM_SHARED_ACL, parsed (not an environment variable). */
  sharedAcl: SharedAclRules = {};
  /** Test hook: the transport hands every request to its handler twice. */
  @Transform(toBool) @IsBoolean() LOOM_TEST_DUPLICATE_DELIVERY = false;
  /** Test hook: the orchestrator SIGKILLs itself right after a turn's user message is stored. */
  @Transform(toBool) @IsBoolean() LOOM_TEST_KILL_AFTER_USER_MESSAGE = false;
}

export class ConfigError extends Error {}

/**
 * Which program reads the environment: an agent never verifies API tokens, so it does not need
 * (and should not be handed) LOOM_JWT_SECRET; an operator's tool (npm run agents:retire) signs
 * nothing and needs neither secret.
 */
export type LoomRole = 'orchestrator' | 'agent' | 'tool';

/**
 * The embedded profile's assignment secret when none is configured: random, drawn once per
 * process. Every part of that profile (orchestrator and agents) runs in this one process, and a
 * secret in the source would let any local user forge assignments to the agents' TCP ports.
 */
const EMBEDDED_AGENT_SECRET = randomBytes(32).toString('hex');

/** Parses and validates an environment; throws ConfigError naming every bad variable. */
export function parseEnv(
  raw: Record<string, string | undefined>,
  role: LoomRole = 'orchestrator',
): LoomEnv {
  const defined = Object.fromEntries(
    Object.entries(raw).filter(([, v]) => v !== undefined && v !== ''),
  );
  const env = plainToInstance(LoomEnv, defined, { exposeDefaultValues: true });
  const problems = validateSync(env, { whitelist: false }).map((e) => {
    const broken = Object.entries(e.constraints ?? {});
    const typeOnly = broken.filter(([rule]) => TYPE_RULES.includes(rule));
    return `${e.property}: ${(typeOnly.length ? typeOnly : broken).map(([, m]) => m).join(', ')}`;
  });
  if (env.LOOM_PROFILE !== 'embedded' && role !== 'tool' && !env.LOOM_AGENT_SECRET)
    problems.unshift('LOOM_AGENT_SECRET: required outside the embedded profile (16+ characters)');
  if (env.LOOM_PROFILE !== 'embedded' && role === 'orchestrator' && !env.LOOM_JWT_SECRET)
    problems.unshift('LOOM_JWT_SECRET: required outside the embedded profile (16+ characters)');
  if (problems.length) throw new ConfigError(`invalid configuration: ${problems.join('; ')}`);
  // ioredis would otherwise fail later with a bare "Invalid URL" that names no variable.
  if (!redisUrlParses(env.REDIS_URL))
    throw new ConfigError(
      'invalid configuration: REDIS_URL must look like redis[s]://[user:password@]host[:port][/db]',
    );
  // An `@` past the host: a password with an unencoded `/` ended the authority early, and the
  // rest of it reads as the database. Named without quoting it.
  if (new URL(env.REDIS_URL).pathname.includes('@'))
    throw new ConfigError(
      'invalid configuration: REDIS_URL names no valid database: its path holds an @ (percent-encode a / or @ in the password)',
    );
  try {
    env.redisClusterNodes = parseClusterNodes(env.REDIS_CLUSTER_NODES);
  } catch (err) {
    throw new ConfigError(
      `invalid configuration: REDIS_CLUSTER_NODES: ${(err as Error).message} (a comma-separated list of a Redis Cluster's seed nodes)`,
    );
  }
  // The SDK reads `localhost:11434/v1` as a URL of scheme `localhost:`: every model call would
  // then fail as "could not be reached", naming nothing.
  if (env.OPENAI_BASE_URL !== undefined && !httpUrlParses(env.OPENAI_BASE_URL))
    throw new ConfigError(
      'invalid configuration: OPENAI_BASE_URL must look like http[s]://host[:port][/path]',
    );
  let natMap: ClusterNatMap;
  try {
    natMap = parseClusterNatMap(env.REDIS_CLUSTER_NAT_MAP);
  } catch (err) {
    throw new ConfigError(
      `invalid configuration: REDIS_CLUSTER_NAT_MAP: ${(err as Error).message} (a comma-separated list of announced=reachable pairs, e.g. 10.0.1.5:6379=redis.example.com:30001)`,
    );
  }
  // Standalone Redis announces nothing: a map there would be silently ignored.
  if (Object.keys(natMap).length && !env.redisClusterNodes.length)
    throw new ConfigError(
      'invalid configuration: REDIS_CLUSTER_NAT_MAP is set but REDIS_CLUSTER_NODES is not: it maps the addresses a Redis Cluster announces, and applies to a cluster only',
    );
  env.redisClusterNatMap = Object.keys(natMap).length ? natMap : undefined;
  // Two deployments kept apart by database numbers would otherwise share the cluster's one.
  const db = new URL(env.REDIS_URL).pathname.replace(/^\//, '');
  if (env.redisClusterNodes.length && db !== '' && db !== '0')
    throw new ConfigError(
      `invalid configuration: REDIS_URL names database ${db}, but a Redis Cluster (REDIS_CLUSTER_NODES) has database 0 only: drop it, and keep deployments apart with LOOM_KEY_PREFIX`,
    );
  try {
    mysqlConnectionConfig(env.MYSQL_URL, env.MYSQL_SSL_CA);
  } catch (err) {
    throw new ConfigError(`invalid configuration: ${(err as Error).message}`);
  }
  if (env.LOOM_PROFILE === 'embedded') env.LOOM_AGENT_SECRET ??= EMBEDDED_AGENT_SECRET;
  // A limit on the whole execution below the silence bound would make that bound meaningless.
  if (env.AGENT_MAX_EXECUTION_MS !== undefined && env.AGENT_MAX_EXECUTION_MS < env.AGENT_TIMEOUT_MS)
    throw new ConfigError(
      'invalid configuration: AGENT_MAX_EXECUTION_MS: must be at least AGENT_TIMEOUT_MS',
    );
  env.AGENT_MAX_EXECUTION_MS ??= Math.max(DEFAULT_AGENT_MAX_EXECUTION_MS, env.AGENT_TIMEOUT_MS);
  // A tenant's share above the process's bound would never be reached, nor a user's above its
  // tenant's: the larger bound would refuse first, and the setting would bound nothing.
  if (turnsPerTenant(env) > env.LOOM_MAX_TURNS_IN_FLIGHT)
    throw new ConfigError(
      `invalid configuration: LOOM_MAX_TURNS_PER_TENANT: must not exceed LOOM_MAX_TURNS_IN_FLIGHT (here ${env.LOOM_MAX_TURNS_IN_FLIGHT})`,
    );
  if (messagesReadPerTenant(env) > env.LOOM_MAX_MESSAGES_READ_IN_FLIGHT)
    throw new ConfigError(
      `invalid configuration: LOOM_MAX_MESSAGES_READ_PER_TENANT: must not exceed LOOM_MAX_MESSAGES_READ_IN_FLIGHT (here ${env.LOOM_MAX_MESSAGES_READ_IN_FLIGHT})`,
    );
  if (turnsPerUser(env) > turnsPerTenant(env))
    throw new ConfigError(
      `invalid configuration: LOOM_MAX_TURNS_PER_USER: must not exceed the tenant's share (LOOM_MAX_TURNS_PER_TENANT, here ${turnsPerTenant(env)})`,
    );
  if (messagesReadPerUser(env) > messagesReadPerTenant(env))
    throw new ConfigError(
      `invalid configuration: LOOM_MAX_MESSAGES_READ_PER_USER: must not exceed the tenant's share (LOOM_MAX_MESSAGES_READ_PER_TENANT, here ${messagesReadPerTenant(env)})`,
    );
  // A share of the connections larger than all of them would bound nothing.
  if (
    env.HTTP_MAX_CONNECTIONS_PER_ADDRESS !== undefined &&
    env.HTTP_MAX_CONNECTIONS_PER_ADDRESS > env.HTTP_MAX_CONNECTIONS
  )
    throw new ConfigError(
      'invalid configuration: HTTP_MAX_CONNECTIONS_PER_ADDRESS: must not exceed HTTP_MAX_CONNECTIONS',
    );
  env.HTTP_MAX_CONNECTIONS_PER_ADDRESS ??= Math.ceil(env.HTTP_MAX_CONNECTIONS / 2);
  if (env.LOOM_JWT_SECRET && env.LOOM_JWT_SECRET === env.LOOM_AGENT_SECRET)
    throw new ConfigError(
      'invalid configuration: LOOM_AGENT_SECRET must differ from LOOM_JWT_SECRET (a leaked agent must not be able to mint API tokens)',
    );
  // A scraper's configuration is kept less closely than the API's: it must not hold a key to it.
  if (
    env.LOOM_METRICS_TOKEN &&
    [env.LOOM_JWT_SECRET, env.LOOM_AGENT_SECRET].includes(env.LOOM_METRICS_TOKEN)
  )
    throw new ConfigError(
      'invalid configuration: LOOM_METRICS_TOKEN must differ from LOOM_JWT_SECRET and LOOM_AGENT_SECRET',
    );
  if (env.LOOM_SHARED_ACL) {
    try {
      env.sharedAcl = parseSharedAclRules(env.LOOM_SHARED_ACL);
    } catch (err) {
      throw new ConfigError(
        `invalid configuration: LOOM_SHARED_ACL: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }
  if (!env.LLM_PROVIDER) env.LLM_PROVIDER = env.OPENAI_API_KEY ? 'openai' : 'offline';
  if (env.LLM_PROVIDER === 'openai' && (!env.OPENAI_API_KEY || !env.LLM_MODEL)) {
    throw new ConfigError(
      'invalid configuration: LLM_PROVIDER=openai needs OPENAI_API_KEY and LLM_MODEL',
    );
  }
  return env;
}

function redisUrlParses(url: string): boolean {
  try {
    return new URL(url).hostname !== '';
  } catch {
    return false;
  }
}

function httpUrlParses(url: string): boolean {
  try {
    const { protocol, hostname } = new URL(url);
    return (protocol === 'http:' || protocol === 'https:') && hostname !== '';
  } catch {
    return false;
  }
}

/** The process environment, validated; on error prints one clear line and exits non-zero. */
export function loadEnvOrExit(
  overrides: Record<string, string | undefined> = {},
  role: LoomRole = 'orchestrator',
): LoomEnv {
  try {
    return parseEnv({ ...process.env, ...overrides }, role);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`loom: ${redactedReason(err)}\n`);
    process.exit(1);
  }
}

/**
 * Where an app's Redis connections go, from the validated environment: REDIS_URL, and on a
 * cluster its seeds and NAT map. Every connection built from the env takes all three.
 */
export function redisTarget(env: LoomEnv): RedisTarget {
  return {
    url: env.REDIS_URL,
    clusterNodes: env.redisClusterNodes,
    natMap: env.redisClusterNatMap,
  };
}

/** The model client's settings from the validated environment (orchestrator and agents alike). */
export function llmConfig(env: LoomEnv): LlmConfig {
  return {
    provider: env.LLM_PROVIDER ?? 'offline',
    offlineDelayMs: env.LLM_OFFLINE_DELAY_MS,
    baseUrl: env.OPENAI_BASE_URL,
    apiKey: env.OPENAI_API_KEY,
    model: env.LLM_MODEL,
    timeoutMs: env.LLM_TIMEOUT_MS,
    maxRetries: env.LLM_MAX_RETRIES,
    prices: {
      promptUsdPerMTok: env.LLM_PROMPT_USD_PER_MTOK,
      completionUsdPerMTok: env.LLM_COMPLETION_USD_PER_MTOK,
    },
  };
}
