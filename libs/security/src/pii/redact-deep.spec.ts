import { redactDeep, sensitiveKeyType } from './redact';

describe('redactDeep', () => {
  it('redacts every string in nested objects and arrays without touching the input', () => {
    const input = {
      msg: 'login from 10.0.0.5',
      user: { email: 'a@b.com', phones: ['13800138000', 'none'] },
      count: 3,
      ok: true,
      nothing: null,
    };
    const copy = JSON.parse(JSON.stringify(input));
    expect(redactDeep(input)).toEqual({
      msg: 'login from [REDACTED_IP]',
      user: { email: '[REDACTED_EMAIL]', phones: ['[REDACTED_PHONE]', 'none'] },
      count: 3,
      ok: true,
      nothing: null,
    });
    expect(input).toEqual(copy);
  });

  // A form's phone or card field often reaches JSON as a number: conversation metadata (the
  // session index) and log fields kept it, where the same value as text was redacted.
  it('redacts a phone or card number given as a JSON number, and leaves other numbers alone', () => {
    expect(
      redactDeep({
        contact: { mobile: 13800138000, card: 4111111111111111 },
        ids: [13800138000],
        count: 3,
        amount: 1999.5,
        at: 1732680000000,
        orderNo: 2024010112345,
      }),
    ).toEqual({
      contact: { mobile: '[REDACTED_PHONE]', card: '[REDACTED_CARD]' },
      ids: ['[REDACTED_PHONE]'],
      count: 3,
      amount: 1999.5,
      at: 1732680000000,
      orderNo: 2024010112345,
    });
  });

  it('keeps a `__proto__` key that JSON gave as data, redacted like any other', () => {
    const out = redactDeep(JSON.parse('{"__proto__": {"email": "a@b.com"}, "k": 1}')) as object;
    expect(Object.keys(out)).toEqual(['__proto__', 'k']);
    expect(JSON.parse(JSON.stringify(out))).toEqual(
      JSON.parse('{"__proto__": {"email": "[REDACTED_EMAIL]"}, "k": 1}'),
    );
  });

  // Conversation metadata and log fields are objects a client shapes: an email or a phone
  // number may be a key (`{ "contacts": { "13800138000": "mom" } }`), not only a value.
  it('redacts PII in keys too, keeping every entry when two keys redact alike', () => {
    const out = redactDeep({
      contacts: { '13800138000': 'mom', 'alice@example.com': 'work', 'bob@example.com': 'home' },
      'card 4532015112830366': { note: 'a@b.com' },
      plain: 1,
    });
    expect(JSON.stringify(out)).not.toMatch(/13800138000|alice@|bob@|4532015112830366|a@b\.com/);
    expect(out).toEqual({
      contacts: {
        '[REDACTED_PHONE]': 'mom',
        '[REDACTED_EMAIL]': 'work',
        '[REDACTED_EMAIL] #2': 'home',
      },
      'card [REDACTED_CARD]': { note: '[REDACTED_EMAIL]' },
      plain: 1,
    });
    // A key that is a secret-looking name is still what decides a value is replaced whole.
    expect(redactDeep({ 'a@b.com': { password: 'x' } })).toEqual({
      '[REDACTED_EMAIL]': { password: '[REDACTED_PASSWORD]' },
    });
  });

  it('replaces values under secret-looking keys whole', () => {
    expect(
      redactDeep({
        password: 'x',
        dbPassword: 1234,
        apiKey: 'short',
        'x-api-key': 'k',
        authorization: 'Basic abc',
        maxTokens: 4096,
      }),
    ).toEqual({
      password: '[REDACTED_PASSWORD]',
      dbPassword: '[REDACTED_PASSWORD]',
      apiKey: '[REDACTED_API_KEY]',
      'x-api-key': '[REDACTED_API_KEY]',
      authorization: '[REDACTED_API_KEY]',
      maxTokens: 4096,
    });
    expect(sensitiveKeyType('access_token')).toBe('API_KEY');
    expect(sensitiveKeyType('tokens')).toBeNull();
  });

  // A bearer credential under its common names went to the logs as is (jwt, a session cookie).
  it('treats common credential names as secret, and Loom ids as visible', () => {
    for (const key of ['jwt', 'idJwt', 'id_token', 'accessToken', 'refresh_token', 'session'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, 'API_KEY']);
    for (const key of ['sessionCookie', 'session_key', 'X-Session-Token'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, 'API_KEY']);
    for (const key of ['sessionId', 'agentSessionId', 'sessions', 'taskId', 'tenantId'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, null]);
  });

  // Only a few spellings were known: `proxy-authorization`, `cookies`, `secretAccessKey` (an AWS
  // SDK's credentials) and their kin went to the logs whole, with the credential in them.
  it('knows a credential name by its normalised ending, whatever its case or separators', () => {
    for (const key of [
      'proxy-authorization',
      'Proxy_Authorization',
      'cookies',
      'Cookies',
      'secretAccessKey',
      'AWS_SECRET_ACCESS_KEY',
      'x-api-key',
      'X_API_KEY',
      'apiKeys',
      'client_secret',
      'clientSecrets',
      'private_key',
      'privateKey',
      'sessionToken',
      'x-amz-security-token',
      'signingKey',
      'encryption_key',
      // Plurals as security.md lists them: a list of tokens under them went out whole.
      'jwts',
      'idJwts',
      'auths',
      'proxy-authorizations',
    ])
      expect([key, sensitiveKeyType(key)]).toEqual([key, 'API_KEY']);
    for (const key of ['passwords', 'DB_PASSWD', 'pass-phrase'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, 'PASSWORD']);
    for (const key of ['tokens', 'maxTokens', 'accessKeyId', 'privateKeyId', 'secretName', 'keys'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, null]);
  });

  // The credentials of an SMTP, HTTP or proxy client's options (`auth: { user, pass }`,
  // `auth: 'user:password'`, `proxyAuth`) went to the logs as they were.
  it('treats `pass` and names ending in `auth` as credentials', () => {
    expect(
      redactDeep({
        smtp: { host: 'mail', auth: { user: 'svc', pass: 'hunter2' } },
        proxy: { host: 'p', proxyAuth: 'u:pw' },
        pass: 'x1',
        author: 'Ann',
      }),
    ).toEqual({
      smtp: { host: 'mail', auth: { user: '[REDACTED_API_KEY]', pass: '[REDACTED_PASSWORD]' } },
      proxy: { host: 'p', proxyAuth: '[REDACTED_API_KEY]' },
      pass: '[REDACTED_PASSWORD]',
      author: 'Ann',
    });
    for (const key of ['bypass', 'compass', 'authMode', 'authorId'])
      expect([key, sensitiveKeyType(key)]).toEqual([key, null]);
  });

  // A secret in a list or an object under a secret-looking key is as secret as a bare one.
  it('replaces every text and number under a secret-looking key, however nested', () => {
    expect(
      redactDeep({
        password: ['hunter2', 'correct horse'],
        credentials: { user: 'svc', pass: 'hunter2', pin: 1234, rotated: true, next: null },
        maxTokens: [1, 2],
      }),
    ).toEqual({
      password: ['[REDACTED_PASSWORD]', '[REDACTED_PASSWORD]'],
      credentials: {
        user: '[REDACTED_API_KEY]',
        pass: '[REDACTED_PASSWORD]',
        pin: '[REDACTED_API_KEY]',
        rotated: true,
        next: null,
      },
      maxTokens: [1, 2],
    });
  });

  it('respects the types option for keys and strings', () => {
    expect(
      redactDeep({ password: 'x', note: 'a@b.com 13800138000' }, { types: ['EMAIL'] }),
    ).toEqual({
      password: 'x',
      note: '[REDACTED_EMAIL] 13800138000',
    });
  });

  it('marks cycles and keeps shared (acyclic) references', () => {
    const shared = { ip: '8.8.8.8' };
    const root: Record<string, unknown> = { a: shared, b: shared };
    root.self = root;
    const list: unknown[] = ['a@b.com'];
    list.push(list);
    expect(redactDeep(root)).toEqual({
      a: { ip: '[REDACTED_IP]' },
      b: { ip: '[REDACTED_IP]' },
      self: '[Circular]',
    });
    expect(redactDeep(list)).toEqual(['[REDACTED_EMAIL]', '[Circular]']);
  });

  it('bounds the depth', () => {
    let deep: Record<string, unknown> = { leaf: 'a@b.com' };
    for (let i = 0; i < 50; i++) deep = { next: deep };
    let out = redactDeep(deep, { maxDepth: 3 }) as Record<string, unknown>;
    for (let i = 0; i < 3; i++) out = out.next as Record<string, unknown>;
    expect(out).toBe('[Truncated]');
    expect(JSON.stringify(redactDeep(deep))).not.toContain('a@b.com');
  });

  it('never throws: throwing getters, proxies and odd values', () => {
    const getter = Object.defineProperty({ ok: 'a@b.com' }, 'bad', {
      enumerable: true,
      get() {
        throw new Error('boom');
      },
    });
    expect(redactDeep(getter)).toEqual({ ok: '[REDACTED_EMAIL]', bad: '[Unreadable]' });
    const hostile = new Proxy(
      {},
      {
        ownKeys() {
          throw new Error('no keys');
        },
      },
    );
    expect(redactDeep(hostile)).toBe('[Unreadable]');
    expect(redactDeep(undefined)).toBeUndefined();
    expect(redactDeep(42)).toBe(42);
    expect(redactDeep(10n)).toBe(10n);
  });

  // Returned as they were, class instances reached the log line by their JSON unredacted.
  it('redacts class instances as their JSON holds them, and returns PII-free ones as they are', () => {
    class Creds {
      user = 'svc';
      apiKey = 'k1';
      note = 'call 13800138000';
    }
    expect(redactDeep({ creds: new Creds() })).toEqual({
      creds: { user: 'svc', apiKey: '[REDACTED_API_KEY]', note: 'call [REDACTED_PHONE]' },
    });
    expect(redactDeep({ url: new URL('https://u:pw12@h.example/x') })).toEqual({
      url: 'https://u:[REDACTED_PASSWORD]@h.example/x',
    });
    const url = new URL('https://h.example/x');
    expect(redactDeep({ url }).url).toBe(url);
    class Endless {
      toJSON(): Endless {
        return new Endless();
      }
    }
    expect(redactDeep({ e: new Endless(), mail: 'a@b.com' }, { maxDepth: 4 })).toEqual({
      e: '[Truncated]',
      mail: '[REDACTED_EMAIL]',
    });
  });

  it('redacts Error messages and keeps a Date as it is', () => {
    const out = redactDeep({ err: new Error('no user a@b.com') }) as unknown as {
      err: Record<string, unknown>;
    };
    expect(out.err.name).toBe('Error');
    expect(out.err.message).toBe('no user [REDACTED_EMAIL]');
    expect(String(out.err.stack)).not.toContain('a@b.com');
    const when = new Date(0);
    expect(redactDeep({ when }).when).toBe(when);
  });
});
