import { ConfigError, llmConfig, parseEnv, redisTarget } from './loom-env';

describe('parseEnv', () => {
  const secrets = { LOOM_JWT_SECRET: 'x'.repeat(32), LOOM_AGENT_SECRET: 'y'.repeat(32) };

  it('applies API.md defaults', () => {
    const env = parseEnv(secrets);
    expect(env.REDIS_URL).toBe('redis://127.0.0.1:6379');
    expect(env.MYSQL_URL).toBe('mysql://root@127.0.0.1:3306/loom');
    expect(env.LOOM_KEY_PREFIX).toBe('loom:');
    expect(env.PORT).toBe(3000);
    expect(env.LLM_PROVIDER).toBe('offline');
    expect(env.TASK_LEASE_MS).toBe(600_000);
    expect(env.DB_MIGRATIONS_RUN).toBe(true);
    expect(env.DB_QUERY_TIMEOUT_MS).toBe(10_000);
    // Three attempts of 30 s, with the SDK's backoff between them, end before AGENT_TIMEOUT_MS.
    expect(env.LLM_TIMEOUT_MS * (env.LLM_MAX_RETRIES + 1)).toBeLessThan(env.AGENT_TIMEOUT_MS);
    expect(env.LLM_MAX_RETRIES).toBe(2);
  });

  it('refuses a REDIS_URL that is not a URL, naming it', () => {
    for (const REDIS_URL of ['redis://::::', 'redis://127.0.0.1:99999', 'redis://']) {
      expect(() => parseEnv({ ...secrets, REDIS_URL })).toThrow(
        new ConfigError(
          'invalid configuration: REDIS_URL must look like redis[s]://[user:password@]host[:port][/db]',
        ),
      );
    }
    expect(parseEnv({ ...secrets, REDIS_URL: 'rediss://:pw@cache.example:6380/2' }).REDIS_URL).toBe(
      'rediss://:pw@cache.example:6380/2',
    );
  });

  it('takes REDIS_CLUSTER_NODES as the seeds of a cluster, refusing one that is not host:port', () => {
    expect(parseEnv(secrets).redisClusterNodes).toEqual([]); // standalone at REDIS_URL
    const env = parseEnv({
      ...secrets,
      REDIS_URL: 'rediss://loom:pw@10.0.0.1:7000',
      REDIS_CLUSTER_NODES: ' 10.0.0.1:7000, redis-b.internal:7001 ,[::1]:7002',
    });
    expect(env.redisClusterNodes).toEqual(['10.0.0.1:7000', 'redis-b.internal:7001', '[::1]:7002']);
    for (const bad of ['10.0.0.1', '10.0.0.1:0', 'a:7000,b:99999', 'redis://a:7000'])
      expect(() => parseEnv({ ...secrets, REDIS_CLUSTER_NODES: bad })).toThrow(
        /^invalid configuration: REDIS_CLUSTER_NODES: ".*" is not host:port \(a comma-separated list of a Redis Cluster's seed nodes\)$/,
      );
  });

  it('takes REDIS_CLUSTER_NAT_MAP as where the announced nodes of a cluster are reached', () => {
    const cluster = { ...secrets, REDIS_CLUSTER_NODES: 'redis.example.com:30001' };
    expect(parseEnv(cluster).redisClusterNatMap).toBeUndefined(); // reached where they announce
    const env = parseEnv({
      ...cluster,
      REDIS_CLUSTER_NAT_MAP:
        ' 10.0.1.5:6379=redis.example.com:30001, [fd00::6]:6379 = [2001:db8::1]:30002 ',
    });
    expect(env.redisClusterNatMap).toEqual({
      '10.0.1.5:6379': { host: 'redis.example.com', port: 30001 },
      'fd00::6:6379': { host: '2001:db8::1', port: 30002 },
    });
    expect(redisTarget(env)).toEqual({
      url: 'redis://127.0.0.1:6379',
      clusterNodes: ['redis.example.com:30001'],
      natMap: env.redisClusterNatMap,
    });
    expect(
      parseEnv({ ...cluster, REDIS_CLUSTER_NAT_MAP: ' , ' }).redisClusterNatMap,
    ).toBeUndefined();
  });

  it('refuses a malformed REDIS_CLUSTER_NAT_MAP pair or an address mapped twice, naming it', () => {
    const cluster = { ...secrets, REDIS_CLUSTER_NODES: 'redis.example.com:30001' };
    const usage =
      '(a comma-separated list of announced=reachable pairs, e.g. 10.0.1.5:6379=redis.example.com:30001)';
    for (const bad of [
      '10.0.1.5:6379',
      '10.0.1.5:6379=lb',
      '10.0.1.5:6379=lb:1=lb:2',
      '::1:6379=lb:1',
    ])
      expect(() =>
        parseEnv({ ...cluster, REDIS_CLUSTER_NAT_MAP: `10.0.1.9:6379=lb:30009,${bad}` }),
      ).toThrow(
        new ConfigError(
          `invalid configuration: REDIS_CLUSTER_NAT_MAP: "${bad}" is not announced=reachable with each side host:port ${usage}`,
        ),
      );
    expect(() =>
      parseEnv({
        ...cluster,
        REDIS_CLUSTER_NAT_MAP: '10.0.1.5:6379=lb:30001,10.0.1.5:6379=lb:30002',
      }),
    ).toThrow(
      new ConfigError(
        `invalid configuration: REDIS_CLUSTER_NAT_MAP: "10.0.1.5:6379=lb:30002" maps 10.0.1.5:6379 a second time ${usage}`,
      ),
    );
  });

  it('refuses REDIS_CLUSTER_NAT_MAP without REDIS_CLUSTER_NODES: standalone Redis announces nothing', () => {
    expect(() =>
      parseEnv({ ...secrets, REDIS_CLUSTER_NAT_MAP: '10.0.1.5:6379=redis.example.com:30001' }),
    ).toThrow(
      new ConfigError(
        'invalid configuration: REDIS_CLUSTER_NAT_MAP is set but REDIS_CLUSTER_NODES is not: it maps the addresses a Redis Cluster announces, and applies to a cluster only',
      ),
    );
    expect(redisTarget(parseEnv(secrets))).toEqual({
      url: 'redis://127.0.0.1:6379',
      clusterNodes: [],
      natMap: undefined,
    });
  });

  it('refuses a database number in REDIS_URL beside REDIS_CLUSTER_NODES: a cluster has database 0 only', () => {
    const cluster = { ...secrets, REDIS_CLUSTER_NODES: '10.0.0.1:7000' };
    for (const url of [
      'redis://10.0.0.1:7000',
      'redis://10.0.0.1:7000/',
      'redis://10.0.0.1:7000/0',
    ])
      expect(parseEnv({ ...cluster, REDIS_URL: url }).redisClusterNodes).toEqual(['10.0.0.1:7000']);
    expect(() => parseEnv({ ...cluster, REDIS_URL: 'rediss://u:p@10.0.0.1:7000/3' })).toThrow(
      /^invalid configuration: REDIS_URL names database 3, but a Redis Cluster \(REDIS_CLUSTER_NODES\) has database 0 only: drop it, and keep deployments apart with LOOM_KEY_PREFIX$/,
    );
    // Standalone, a database number is as before.
    expect(parseEnv({ ...secrets, REDIS_URL: 'redis://127.0.0.1:6379/3' }).REDIS_URL).toBe(
      'redis://127.0.0.1:6379/3',
    );
  });

  it('hands the model settings to the model client, and bounds them', () => {
    const env = parseEnv({
      ...secrets,
      OPENAI_API_KEY: 'sk-test',
      LLM_MODEL: 'm',
      OPENAI_BASE_URL: 'http://127.0.0.1:1/v1',
      LLM_TIMEOUT_MS: '15000',
      LLM_MAX_RETRIES: '0',
      LLM_PROMPT_USD_PER_MTOK: '2.5',
      LLM_COMPLETION_USD_PER_MTOK: '10',
    });
    expect(llmConfig(env)).toEqual({
      provider: 'openai',
      offlineDelayMs: 0,
      baseUrl: 'http://127.0.0.1:1/v1',
      apiKey: 'sk-test',
      model: 'm',
      timeoutMs: 15_000,
      maxRetries: 0,
      prices: { promptUsdPerMTok: 2.5, completionUsdPerMTok: 10 },
    });
    expect(llmConfig(parseEnv(secrets)).prices).toEqual({
      promptUsdPerMTok: 0,
      completionUsdPerMTok: 0,
    });
    expect(() => parseEnv({ ...secrets, LLM_PROMPT_USD_PER_MTOK: '-1' })).toThrow(
      /LLM_PROMPT_USD_PER_MTOK/,
    );
    expect(() => parseEnv({ ...secrets, LLM_COMPLETION_USD_PER_MTOK: 'cheap' })).toThrow(
      /LLM_COMPLETION_USD_PER_MTOK/,
    );
    expect(() => parseEnv({ ...secrets, LLM_MAX_RETRIES: '11' })).toThrow(/LLM_MAX_RETRIES/);
    expect(() => parseEnv({ ...secrets, LLM_TIMEOUT_MS: '0' })).toThrow(/LLM_TIMEOUT_MS/);
  });

  it('refuses an OPENAI_BASE_URL that is not an http(s) URL, naming it', () => {
    const openai = { ...secrets, OPENAI_API_KEY: 'sk-test', LLM_MODEL: 'm' };
    // Without a scheme the SDK reads `localhost:11434/v1` as a URL of scheme `localhost:`: every
    // model call would fail as "could not be reached", with nothing naming the variable.
    for (const OPENAI_BASE_URL of ['localhost:11434/v1', 'api.example.com/v1', 'ftp://x/v1', 'a b'])
      expect(() => parseEnv({ ...openai, OPENAI_BASE_URL })).toThrow(
        new ConfigError(
          'invalid configuration: OPENAI_BASE_URL must look like http[s]://host[:port][/path]',
        ),
      );
    for (const OPENAI_BASE_URL of ['https://api.example.com/v1', 'http://127.0.0.1:11434/v1'])
      expect(llmConfig(parseEnv({ ...openai, OPENAI_BASE_URL })).baseUrl).toBe(OPENAI_BASE_URL);
  });

  it('requires the secrets outside the embedded profile', () => {
    expect(() => parseEnv({})).toThrow(/LOOM_JWT_SECRET/);
    expect(() => parseEnv({ LOOM_JWT_SECRET: 'x'.repeat(32) })).toThrow(/LOOM_AGENT_SECRET/);
    expect(() => parseEnv({ LOOM_PROFILE: 'embedded' })).not.toThrow();
  });

  it('gives the embedded profile a random assignment secret of its own process, not one in the source', () => {
    const embedded = parseEnv({ LOOM_PROFILE: 'embedded' });
    expect(embedded.LOOM_AGENT_SECRET).toMatch(/^[0-9a-f]{64}$/);
    // Orchestrator and agents of that profile share this one process, and so the secret.
    expect(parseEnv({ LOOM_PROFILE: 'embedded' }, 'agent').LOOM_AGENT_SECRET).toBe(
      embedded.LOOM_AGENT_SECRET,
    );
    expect(embedded.LOOM_AGENT_SECRET).not.toBe('embedded-profile-only-agent-secret');
    const configured = parseEnv({ LOOM_PROFILE: 'embedded', LOOM_AGENT_SECRET: 'z'.repeat(32) });
    expect(configured.LOOM_AGENT_SECRET).toBe('z'.repeat(32));
    expect(parseEnv({ LOOM_PROFILE: 'distributed', ...secrets }).LOOM_AGENT_SECRET).toBe(
      secrets.LOOM_AGENT_SECRET,
    );
  });

  it('does not ask an agent for the API token secret, only for the assignment secret', () => {
    const env = parseEnv({ LOOM_AGENT_SECRET: 'y'.repeat(32) }, 'agent');
    expect(env.LOOM_JWT_SECRET).toBeUndefined();
    expect(() => parseEnv({}, 'agent')).toThrow(/LOOM_AGENT_SECRET/);
    expect(() => parseEnv({ LOOM_AGENT_SECRET: 'y'.repeat(32) })).toThrow(/LOOM_JWT_SECRET/);
    expect(() => parseEnv({ ...secrets, LOOM_JWT_SECRET: 'short' }, 'agent')).toThrow(
      /LOOM_JWT_SECRET/,
    );
  });

  it('asks an operator tool for neither secret', () => {
    expect(() => parseEnv({}, 'tool')).not.toThrow();
    expect(() => parseEnv({ LOOM_AGENT_SECRET: 'short' }, 'tool')).toThrow(/LOOM_AGENT_SECRET/);
  });

  it('refuses the API token secret as the assignment secret', () => {
    const same = 'z'.repeat(32);
    expect(() => parseEnv({ LOOM_JWT_SECRET: same, LOOM_AGENT_SECRET: same })).toThrow(
      /LOOM_AGENT_SECRET must differ from LOOM_JWT_SECRET/,
    );
    expect(() => parseEnv({ LOOM_JWT_SECRET: same, LOOM_AGENT_SECRET: same }, 'agent')).toThrow(
      /must differ/,
    );
  });

  it('serves /metrics by default, open, or behind a token of 16+ visible characters of its own', () => {
    expect(parseEnv(secrets)).toMatchObject({ LOOM_METRICS: true, LOOM_METRICS_TOKEN: undefined });
    expect(parseEnv({ ...secrets, LOOM_METRICS: 'false' }).LOOM_METRICS).toBe(false);
    expect(() => parseEnv({ ...secrets, LOOM_METRICS: 'off' })).toThrow(
      /^invalid configuration: LOOM_METRICS: LOOM_METRICS must be a boolean value$/,
    );
    const token = 's'.repeat(16);
    expect(parseEnv({ ...secrets, LOOM_METRICS_TOKEN: token }).LOOM_METRICS_TOKEN).toBe(token);
    expect(() => parseEnv({ ...secrets, LOOM_METRICS_TOKEN: 's'.repeat(15) })).toThrow(
      /^invalid configuration: LOOM_METRICS_TOKEN: LOOM_METRICS_TOKEN must be longer than or equal to 16 characters$/,
    );
    expect(() => parseEnv({ ...secrets, LOOM_METRICS_TOKEN: 'with a space 0123' })).toThrow(
      /LOOM_METRICS_TOKEN must be visible ASCII characters/,
    );
    for (const reused of [secrets.LOOM_JWT_SECRET, secrets.LOOM_AGENT_SECRET])
      expect(() => parseEnv({ ...secrets, LOOM_METRICS_TOKEN: reused })).toThrow(
        'invalid configuration: LOOM_METRICS_TOKEN must differ from LOOM_JWT_SECRET and LOOM_AGENT_SECRET',
      );
  });

  it('keeps dead-letter copies 7 days by default; a minute to a year when set', () => {
    expect(parseEnv(secrets).AGENT_DEAD_LETTER_RETENTION_MS).toBe(7 * 86_400_000);
    const year = String(365 * 86_400_000);
    expect(parseEnv({ ...secrets, AGENT_DEAD_LETTER_RETENTION_MS: year })).toMatchObject({
      AGENT_DEAD_LETTER_RETENTION_MS: 365 * 86_400_000,
    });
    for (const raw of ['59999', String(365 * 86_400_000 + 1)])
      expect(() => parseEnv({ ...secrets, AGENT_DEAD_LETTER_RETENTION_MS: raw })).toThrow(
        /AGENT_DEAD_LETTER_RETENTION_MS/,
      );
  });

  it('bounds open HTTP connections, in all and per remote address (by default half of all)', () => {
    expect(parseEnv(secrets)).toMatchObject({
      HTTP_MAX_CONNECTIONS: 4096,
      HTTP_MAX_CONNECTIONS_PER_ADDRESS: 2048,
    });
    // Half, rounded up: one connection in all is still one for an address.
    expect(parseEnv({ ...secrets, HTTP_MAX_CONNECTIONS: '1' })).toMatchObject({
      HTTP_MAX_CONNECTIONS: 1,
      HTTP_MAX_CONNECTIONS_PER_ADDRESS: 1,
    });
    expect(
      parseEnv({
        ...secrets,
        HTTP_MAX_CONNECTIONS: '100',
        HTTP_MAX_CONNECTIONS_PER_ADDRESS: '100',
      }),
    ).toMatchObject({ HTTP_MAX_CONNECTIONS: 100, HTTP_MAX_CONNECTIONS_PER_ADDRESS: 100 });
    for (const raw of ['0', '1000001', '2.5', 'many'])
      expect(() => parseEnv({ ...secrets, HTTP_MAX_CONNECTIONS: raw })).toThrow(
        /^invalid configuration: HTTP_MAX_CONNECTIONS: /,
      );
    for (const raw of ['0', '1.5'])
      expect(() => parseEnv({ ...secrets, HTTP_MAX_CONNECTIONS_PER_ADDRESS: raw })).toThrow(
        /^invalid configuration: HTTP_MAX_CONNECTIONS_PER_ADDRESS: /,
      );
    expect(() =>
      parseEnv({
        ...secrets,
        HTTP_MAX_CONNECTIONS: '100',
        HTTP_MAX_CONNECTIONS_PER_ADDRESS: '101',
      }),
    ).toThrow(
      /^invalid configuration: HTTP_MAX_CONNECTIONS_PER_ADDRESS: must not exceed HTTP_MAX_CONNECTIONS$/,
    );
  });

  it('names every bad variable', () => {
    expect(() => parseEnv({ ...secrets, PORT: 'abc', MYSQL_URL: 'postgres://x' })).toThrow(
      ConfigError,
    );
    expect(() => parseEnv({ ...secrets, PORT: 'abc' })).toThrow(/PORT/);
    expect(() => parseEnv({ ...secrets, LLM_PROVIDER: 'openai' })).toThrow(/OPENAI_API_KEY/);
  });

  it('takes the ssl option of MYSQL_URL and MYSQL_SSL_CA, and refuses other options at boot', () => {
    const url = 'mysql://loom:pw@db.example.com:3306/loom?ssl={"rejectUnauthorized":true}';
    expect(parseEnv({ ...secrets, MYSQL_URL: url }).MYSQL_URL).toBe(url);
    expect(() =>
      parseEnv({ ...secrets, MYSQL_URL: 'mysql://root@db:3306/loom?multipleStatements=true' }),
    ).toThrow(
      'invalid configuration: MYSQL_URL option multipleStatements is not allowed: Loom sends one statement per query',
    );
    expect(() => parseEnv({ ...secrets, MYSQL_SSL_CA: '/nonexistent/ca.pem' })).toThrow(
      'invalid configuration: MYSQL_SSL_CA: cannot read /nonexistent/ca.pem (ENOENT)',
    );
  });

  it('turns strings into numbers and booleans', () => {
    const env = parseEnv({
      ...secrets,
      PORT: '8080',
      DB_MIGRATIONS_RUN: 'false',
      OPENAI_API_KEY: 'k',
      LLM_MODEL: 'm',
    });
    expect(env.PORT).toBe(8080);
    expect(env.DB_MIGRATIONS_RUN).toBe(false);
    expect(env.LLM_PROVIDER).toBe('openai');
  });

  it('reads true/false/1/0 in any case, and refuses any other boolean', () => {
    for (const [raw, value] of [
      ['TRUE', true],
      [' True ', true],
      ['1', true],
      ['FALSE', false],
      ['0', false],
    ] as const)
      expect(parseEnv({ ...secrets, LOOM_REDACT_STORED: raw }).LOOM_REDACT_STORED).toBe(value);
    // "yes" used to mean false without a word: redaction silently off.
    for (const raw of ['yes', 'on', 'maybe'])
      expect(() => parseEnv({ ...secrets, LOOM_REDACT_STORED: raw })).toThrow(
        /LOOM_REDACT_STORED: LOOM_REDACT_STORED must be a boolean value$/,
      );
  });

  it('says only that a number is not a number, not which range it also misses', () => {
    expect(() => parseEnv({ ...secrets, PORT: 'abc' })).toThrow(
      /^invalid configuration: PORT: PORT must be an integer number$/,
    );
    expect(() => parseEnv({ ...secrets, PORT: '70000' })).toThrow(
      /^invalid configuration: PORT: PORT must not be greater than 65535$/,
    );
  });

  // Number() reads '  ' as 0, '0x10' as 16 and '1e3' as 1000: a blank AGENT_TIMEOUT_MS was 0 ms.
  it('takes decimal text only for a number, blanks and other notations refused', () => {
    for (const raw of ['  ', '0x10', '1e3', '12abc', 'Infinity'])
      expect(() => parseEnv({ ...secrets, AGENT_TIMEOUT_MS: raw })).toThrow(
        /^invalid configuration: AGENT_TIMEOUT_MS: AGENT_TIMEOUT_MS must be an integer number$/,
      );
    expect(parseEnv({ ...secrets, PORT: ' 8080 ' }).PORT).toBe(8080);
    // Decimal text Number() read before, and still does: a price of .15, a port of +8080.
    expect(parseEnv({ ...secrets, LLM_PROMPT_USD_PER_MTOK: '.15' }).LLM_PROMPT_USD_PER_MTOK).toBe(
      0.15,
    );
    expect(
      parseEnv({ ...secrets, LLM_COMPLETION_USD_PER_MTOK: '2.' }).LLM_COMPLETION_USD_PER_MTOK,
    ).toBe(2);
    expect(parseEnv({ ...secrets, PORT: '+8080' }).PORT).toBe(8080);
    expect(() => parseEnv({ ...secrets, AGENT_TIMEOUT_MS: '.' })).toThrow(/AGENT_TIMEOUT_MS/);
    expect(parseEnv({ ...secrets, LLM_PROMPT_USD_PER_MTOK: '0.15' }).LLM_PROMPT_USD_PER_MTOK).toBe(
      0.15,
    );
  });

  it('refuses a time over a day, which a Node timer could not wait (it fires at once)', () => {
    // AGENT_TIMEOUT_MS=3000000000 answered every turn 503 TIMEOUT within 60 ms.
    for (const name of [
      'TASK_LEASE_MS',
      'RECOVERY_INTERVAL_MS',
      'SHUTDOWN_HANDOVER_MS',
      'AGENT_TIMEOUT_MS',
      'AGENT_MAX_EXECUTION_MS',
      'AGENT_CLAIM_IDLE_MS',
      'LOOM_RATE_LIMIT_WINDOW_MS',
    ]) {
      expect(() => parseEnv({ ...secrets, [name]: '3000000000' })).toThrow(
        new RegExp(`^invalid configuration: ${name}: ${name} must not be greater than 86400000$`),
      );
      expect(() => parseEnv({ ...secrets, [name]: '86400000' })).not.toThrow();
    }
  });

  it('bounds a whole agent execution by AGENT_MAX_EXECUTION_MS, never below AGENT_TIMEOUT_MS', () => {
    expect(parseEnv(secrets).AGENT_MAX_EXECUTION_MS).toBe(900_000);
    // A deployment that raised AGENT_TIMEOUT_MS past 15 min keeps working as it did.
    expect(parseEnv({ ...secrets, AGENT_TIMEOUT_MS: '1200000' }).AGENT_MAX_EXECUTION_MS).toBe(
      1_200_000,
    );
    expect(
      parseEnv({ ...secrets, AGENT_TIMEOUT_MS: '1500', AGENT_MAX_EXECUTION_MS: '5000' })
        .AGENT_MAX_EXECUTION_MS,
    ).toBe(5000);
    expect(() =>
      parseEnv({ ...secrets, AGENT_TIMEOUT_MS: '5000', AGENT_MAX_EXECUTION_MS: '4999' }),
    ).toThrow(/^invalid configuration: AGENT_MAX_EXECUTION_MS: must be at least AGENT_TIMEOUT_MS$/);
    expect(() => parseEnv({ ...secrets, AGENT_MAX_EXECUTION_MS: '99' })).toThrow(
      /AGENT_MAX_EXECUTION_MS must not be less than 100/,
    );
  });
});
