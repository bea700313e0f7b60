import {
  apiKeyDetector,
  emailDetector,
  ipDetector,
  numericDetector,
  passportDetector,
  passwordDetector,
  phoneDetector,
  ssnDetector,
} from './detectors';
import { redactPii } from './redact';
import type { Detector } from './types';

// "type:value" for every span a detector reports, in text order.
function found(detector: Detector, text: string): string[] {
  return detector
    .detect(text)
    .sort((a, b) => a.start - b.start)
    .map((s) => `${s.type}:${text.slice(s.start, s.end)}`);
}

describe('numericDetector', () => {
  it('finds cards, bank cards, resident ids and mainland phones by whole digit groups', () => {
    const text =
      'visa 4111 1111 1111 1111, 银行卡 6222021234567890128, 身份证 11010519491231002X, 手机 138-0013-8000';
    expect(found(numericDetector, text)).toEqual([
      'CARD:4111 1111 1111 1111',
      'BANK_CARD:6222021234567890128',
      'CN_ID:11010519491231002X',
      'PHONE:138-0013-8000',
    ]);
  });

  it('needs a bank keyword for a Luhn-valid number outside the card networks', () => {
    expect(found(numericDetector, '工行银行卡号 955880200001234562')).toEqual([
      'BANK_CARD:955880200001234562',
    ]);
    expect(found(numericDetector, 'id 955880200001234562')).toEqual([]);
  });

  it('does not cut a value out of a longer number or an identifier', () => {
    expect(found(numericDetector, '41111111111111110')).toEqual([]);
    expect(found(numericDetector, 'INV-4111111111111111')).toEqual([]);
    expect(found(numericDetector, 'x4111111111111111')).toEqual([]);
    expect(found(numericDetector, '3.4111111111111111')).toEqual([]);
  });

  it('takes the card from a run that continues with other numbers', () => {
    expect(found(numericDetector, '4111 1111 1111 1111 12 25')).toEqual([
      'CARD:4111 1111 1111 1111',
    ]);
  });

  it('rejects mixed separators and odd groupings for cards', () => {
    expect(found(numericDetector, '4111 1111-1111 1111')).toEqual([]);
    expect(found(numericDetector, '41 11 11 11 11 11 11 11')).toEqual([]);
  });

  it('honours order / invoice context and amounts', () => {
    expect(found(numericDetector, '订单号 4111111111111111')).toEqual([]);
    expect(found(numericDetector, 'order 12, call 13800138000')).toEqual(['PHONE:13800138000']);
    expect(found(numericDetector, '¥13800138000')).toEqual([]);
    expect(found(numericDetector, '13800138000 元')).toEqual([]);
  });
});

describe('mainland landlines, every way they are written', () => {
  // A user who typed an office number with a space after the area code, or with the trunk "0"
  // in brackets after +86, found it unredacted in the logs (and, with LOOM_REDACT_STORED, in
  // the store and in what the agents saw), where 010-62345678 was redacted.
  it.each([
    ['办公室 010 62345678 工作日', '010 62345678'],
    ['办公室 010-62345678 工作日', '010-62345678'],
    ['办公室 (010)62345678 工作日', '(010)62345678'],
    ['深圳 0755-8888 6666 工作日', '0755-8888 6666'],
    ['深圳 0755 8888 6666 工作日', '0755 8888 6666'],
    ['深圳 0755 8888666 工作日', '0755 8888666'],
    ['tel +86 10 6234 5678 (office)', '+86 10 6234 5678'],
    ['tel +86 (0)10 6234 5678 (office)', '+86 (0)10 6234 5678'],
    ['座机:021 62345678。', '021 62345678'],
  ])('redacts %j', (text, value) => {
    expect(redactPii(text)).toBe(text.replace(value, '[REDACTED_PHONE]'));
  });

  it.each([
    // no mainland area code: 001, 011, 0105 are none; Beijing numbers have 8 digits
    '编号 001 62345678',
    '编号 011 62345678',
    '编号 0105 62345678',
    '区号 010 6234567',
    // the local number must not start with 0 or 1
    '共 010 12345678 项',
    // dates, amounts, order and case numbers
    '日期 0520 20240520',
    '金额 010 62345678 元',
    '¥0755 88886666',
    '订单号 0571 88886666',
    '（2024）京0105民初12345号',
    '案号 (2023) 粤0305 民初 23456 号',
    '2024-05-20 0755',
  ])('leaves %j alone', (text) => {
    expect(redactPii(text)).toBe(text);
  });
});

describe('phoneDetector', () => {
  it('finds +CC and NANP formats', () => {
    expect(found(phoneDetector, 'a +44 20 7946 0958 b (212) 555-0198 c 415.555.2671')).toEqual([
      'PHONE:+44 20 7946 0958',
      'PHONE:(212) 555-0198',
      'PHONE:415.555.2671',
    ]);
  });

  // How a mainland landline is most often written: the area code in brackets, full-width in
  // Chinese text. Such a number went to the logs (and, with LOOM_REDACT_STORED, to the store).
  it('finds mainland landlines with the area code in brackets', () => {
    expect(
      found(
        phoneDetector,
        '电话（010）62345678，传真 (021) 6234 5678，分机(0755)8888888。tel: (010)6234-5678',
      ),
    ).toEqual([
      'PHONE:（010）62345678',
      'PHONE:(021) 6234 5678',
      'PHONE:(0755)8888888',
      'PHONE:(010)6234-5678',
    ]);
  });

  it('leaves bracketed numbers that are no landline alone', () => {
    expect(
      found(phoneDetector, '见(001)12345678、第(010)123 号、(2024)62345678、f(010)62345678x'),
    ).toEqual([]);
  });

  it('rejects too few digits, invalid NANP numbers and time-zone offsets', () => {
    expect(found(phoneDetector, '+1 234, 123-456-7890, +08:00, +100 points')).toEqual([]);
  });
});

describe('emailDetector', () => {
  it('finds addresses and leaves handles and hosts alone', () => {
    expect(found(emailDetector, 'a.b+c@mail.example.com, @handle, root@localhost')).toEqual([
      'EMAIL:a.b+c@mail.example.com',
    ]);
  });
});

describe('ipDetector', () => {
  it('finds IPv4 and IPv6 but not versions or out-of-range octets', () => {
    expect(
      found(
        ipDetector,
        '10.0.0.1 v1.2.3.4 1.2.3.4.5 256.1.1.1 version 2.0.0.1 2001:db8::1 12:30:45',
      ),
    ).toEqual(['IP:10.0.0.1', 'IP:2001:db8::1']);
  });
});

describe('ipDetector and socket errors', () => {
  // A connection error's own address (Node's `<syscall> <code> <address>:<port>`, as ioredis and
  // mysql2 pass it on) was masked, so an operator could not tell which server was down.
  it("leaves the server address in a socket error's own words visible", () => {
    for (const text of [
      'Redis client connection: connect ECONNREFUSED 127.0.0.1:6379',
      'Error: connect ETIMEDOUT 10.0.3.7:3306\n    at TCPConnectWrap.afterConnect',
      'connect EHOSTUNREACH 192.168.1.20:6380',
      'connect ECONNREFUSED ::1:6379',
      'listen EADDRINUSE: address already in use 0.0.0.0:3000',
    ])
      expect([text, found(ipDetector, text)]).toEqual([text, []]);
  });

  it("still finds an address anywhere else, a user's or a bare host:port", () => {
    expect(
      found(
        ipDetector,
        'my ip is 10.0.0.5; login from 203.0.113.9:443; ECONNREFUSED, said 198.51.100.7:80',
      ),
    ).toEqual(['IP:10.0.0.5', 'IP:203.0.113.9', 'IP:198.51.100.7']);
  });
});

describe('ssnDetector', () => {
  it('finds dashed SSNs and keyed undashed ones, skipping invalid areas', () => {
    expect(found(ssnDetector, '123-45-6789 999-12-3456 SSN: 078051120 987654321')).toEqual([
      'SSN:123-45-6789',
      'SSN:078051120',
    ]);
  });
});

describe('passportDetector', () => {
  it('only reports numbers shortly after a passport keyword', () => {
    expect(
      found(passportDetector, 'passport no. E12345678; E87654321; 护照号码：G12345678'),
    ).toEqual(['PASSPORT:E12345678', 'PASSPORT:G12345678']);
    expect(found(passportDetector, 'passport' + ' '.repeat(60) + 'E12345678')).toEqual([]);
  });
});

describe('apiKeyDetector', () => {
  it('finds provider token shapes and keyed secrets (value only)', () => {
    const text =
      'sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12 AKIAIOSFODNN7EXAMPLE Bearer abcdef0123456789abcdef. api_key: "0123456789abcdefABCDEF"';
    expect(found(apiKeyDetector, text)).toEqual([
      'API_KEY:sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12',
      'API_KEY:AKIAIOSFODNN7EXAMPLE',
      'API_KEY:abcdef0123456789abcdef',
      'API_KEY:0123456789abcdefABCDEF',
    ]);
  });

  // A named key's value of under 20 characters (a test or legacy key) went to the logs as is.
  it('finds a shorter value after an unambiguous key name', () => {
    expect(
      found(apiKeyDetector, 'api_key=Ab12Cd34Ef56Gh client_secret: "x9Y8z7W6v5U4" auth-token=abc'),
    ).toEqual(['API_KEY:Ab12Cd34Ef56Gh', 'API_KEY:x9Y8z7W6v5U4']);
  });

  // Only a header encoded from `{"…` (eyJ…) was taken for a JWT: one whose header JSON has a space
  // or newline after the brace (eyA…, ewo…), a legal token every JWT library accepts, and an
  // unsigned one (`alg: none`, empty signature) went to the logs whole, with its claims.
  it('finds a JWT by its decoded header, whatever the header JSON looks like', () => {
    const b64 = (s: string) => Buffer.from(s).toString('base64url');
    const payload = b64('{"sub":"user-1","tenantId":"t-1","exp":4102444800}');
    const sig = 'SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c';
    const tokens = [
      `${b64('{"typ":"JWT","alg":"HS256"}')}.${payload}.${sig}`,
      `${b64('{ "alg": "HS256", "typ": "JWT" }')}.${payload}.${sig}`,
      `${b64('{\n  "alg": "RS256"\n}')}.${payload}.${sig}`,
      `${b64('\t{"kid":"k1","alg":"ES256"}')}.${payload}.${sig}`,
      `${b64('{"alg":"none"}')}.${payload}.`,
    ];
    for (const token of tokens) {
      for (const text of [
        `GET /v1/conversations/${token}/tasks`,
        `callback?token=${token}&x=1`,
        `jwt ${token}, then`,
      ])
        expect(redactPii(text)).toBe(text.replace(token, '[REDACTED_API_KEY]'));
    }
  });

  // A request's headers quoted in text (a dump, an HTTP library's error): only a Bearer token of
  // 16 characters or more, or a Basic one with a digit or "=", was taken; a short key, a
  // digit-free Basic pair (dXNlcjpwYXNz is user:pass) or a session cookie went out as it was.
  it('finds the value of Authorization and Cookie headers quoted in text, however short', () => {
    for (const [text, secret] of [
      ['Authorization: Basic dXNlcjpwYXNz', 'dXNlcjpwYXNz'],
      ['authorization: Bearer local-key-1', 'local-key-1'],
      ['Proxy-Authorization: Basic YTpi', 'YTpi'],
      ['{"authorization":"Token abc123xyz","accept":"*/*"}', 'abc123xyz'],
      ['Cookie: sid=s%3AabcdefGHIJ.xyz; theme=dark', 'sid=s%3AabcdefGHIJ.xyz; theme=dark'],
      [
        'set-cookie: session=Fe26.2**abcdef; Path=/; HttpOnly',
        'session=Fe26.2**abcdef; Path=/; HttpOnly',
      ],
    ]) {
      expect(found(apiKeyDetector, text)).toContain(`API_KEY:${secret}`);
      expect(redactPii(text)).not.toContain(secret);
    }
  });

  // A PEM private key (a TLS client key in MYSQL_URL's ssl options, a service account's JSON)
  // quoted in a log or error went out whole: its base64 lines have no shape the detector knows.
  // Only Authorization and Cookie were taken whatever their length: a short key in the other
  // credential headers (a local or test key, a vault token) went out after its name.
  it('finds the value of API-key and token headers quoted in text, however short', () => {
    for (const [text, secret] of [
      ['x-api-key: k1abc', 'k1abc'],
      ['{"X-Auth-Token":"abc123","accept":"*/*"}', 'abc123'],
      ['X-Goog-Api-Key: AIzaShort', 'AIzaShort'],
      ['PRIVATE-TOKEN: glpat-short', 'glpat-short'],
      ["'x-vault-token': 'hvs.abc'", 'hvs.abc'],
      ['api-key: az1', 'az1'],
      ['Ocp-Apim-Subscription-Key: 0a1b', '0a1b'],
    ]) {
      expect(found(apiKeyDetector, text)).toContain(`API_KEY:${secret}`);
      expect(redactPii(text)).not.toContain(secret);
    }
    expect(found(apiKeyDetector, 'set the x-api-key header; api keys: see the wiki')).toEqual([]);
  });

  // A presigned S3 or GCS URL, or an Azure SAS URL, grants access to whoever holds it until it
  // expires: its signature went to the logs with the rest of the URL.
  it("finds a presigned or SAS URL's signature", () => {
    const sig = 'fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024';
    for (const [text, secret] of [
      [`https://b.s3.amazonaws.com/k?X-Amz-Expires=900&X-Amz-Signature=${sig}`, sig],
      [`https://storage.googleapis.com/b/o?X-Goog-Signature=${sig}&x=1`, sig],
      [
        'https://a.blob.core.windows.net/c/f?sv=2022-11-02&se=2026-01-01&sp=r&sig=Xk2%2BabcDEF0123456789ghijKL%3D',
        'Xk2%2BabcDEF0123456789ghijKL%3D',
      ],
    ]) {
      expect(found(apiKeyDetector, text)).toContain(`API_KEY:${secret}`);
      expect(redactPii(text)).not.toContain(secret);
    }
    expect(found(apiKeyDetector, 'see ?sig=abc and the signature= field')).toEqual([]);
  });

  it('finds a PEM private key, with real or escaped newlines, cut short or not', () => {
    const body = 'MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj';
    for (const [text, secret] of [
      [`-----BEGIN PRIVATE KEY-----\n${body}\n${body}\n-----END PRIVATE KEY-----`, body],
      [
        `{"key":"-----BEGIN RSA PRIVATE KEY-----\\n${body}\\n-----END RSA PRIVATE KEY-----\\n"}`,
        body,
      ],
      [`ssl key -----BEGIN EC PRIVATE KEY-----\n${body}`, body],
    ]) {
      expect(redactPii(text)).not.toContain(secret.slice(0, 16));
      expect(redactPii(text)).not.toContain(secret.slice(-16));
    }
    const cert = `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----`;
    expect(redactPii(cert)).toBe(cert); // a certificate is public
  });

  it('leaves prose that only mentions authorization or cookies alone', () => {
    for (const text of [
      'Authorization: please check the contract first',
      'Cookie: chocolate chip, no nuts',
      'the cookie policy needs authorization from legal',
    ])
      expect(found(apiKeyDetector, text)).toEqual([]);
  });

  it('leaves dotted names and versions that only look like three base64 parts', () => {
    for (const text of [
      'loom.orchestrator.turnService.completed',
      'com.example.someVeryLongPackageName.ClassName',
      'v12345678.abcdefgh.ijklmnop',
      `${Buffer.from('not json at all').toString('base64url')}.abcdefgh12.ijklmnop34`,
    ])
      expect(found(apiKeyDetector, text)).toEqual([]);
  });

  // Left in the logs whole: an AWS secret access key after its name or its key id, a Slack
  // webhook's secret path, GitLab tokens and other vendors' prefixed tokens; and a GitHub or GitLab
  // token without a digit in it (one GitLab token in 30 has none), as only `sk-…` needs one.
  it('finds AWS secret keys by their name or id, Slack webhooks and prefixed vendor tokens', () => {
    const aws = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';
    const secrets: Array<[string, string]> = [
      [`aws_secret_access_key = ${aws}`, aws],
      [`AWS_SECRET_ACCESS_KEY=${aws}`, aws],
      [`{"AccessKeyId":"ASIAY34FZKBOKMUTVV7A","SecretAccessKey":"${aws}"}`, aws],
      [`secretAccessKey: '${aws}'`, aws],
      [`AKIAIOSFODNN7EXAMPLE ${aws}`, aws],
      [`AKIAIOSFODNN7EXAMPLE,${aws}`, aws],
      [`"AKIAIOSFODNN7EXAMPLE": "${aws}"`, aws],
      [
        'post to https://hooks.slack.com/services/T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX failed',
        'T0123ABCD/B0456EFGH/aBcDeFgHiJkLmNoPqRsTuVwX',
      ],
      [
        'xoxe-1-My0xLTIzNDU2Nzg5MDEyMy0xMjM0NTY3ODkw',
        'xoxe-1-My0xLTIzNDU2Nzg5MDEyMy0xMjM0NTY3ODkw',
      ],
      [
        'xapp-1-A0123ABCDEF-1234567890123-abcdef0123',
        'xapp-1-A0123ABCDEF-1234567890123-abcdef0123',
      ],
      ['glpat-AbCd1234EfGh5678IjKl', 'glpat-AbCd1234EfGh5678IjKl'],
      ['token glpat-xYzAbCdEfGhIjKlMnOpQ.', 'glpat-xYzAbCdEfGhIjKlMnOpQ'],
      ['gldt-AbCd1234EfGh5678IjKl gloas-ZyXw9876VuTs5432RqPo', 'gldt-AbCd1234EfGh5678IjKl'],
      ['ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ', 'ghp_abcdefghijklmnopqrstuvwxyzABCDEFGHIJ'],
      ['npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789', 'npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789'],
      [
        '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',
        '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',
      ],
      ['GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz12', 'GOCSPX-AbCdEfGhIjKlMnOpQrStUvWxYz12'],
      ['ya29.a0AfH6SMBxYzAbCdEfGhIjKlMnOp', 'ya29.a0AfH6SMBxYzAbCdEfGhIjKlMnOp'],
      ['hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh', 'hf_AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh'],
      ['whsec_AbCdEfGhIjKlMnOpQrStUvWx1234', 'whsec_AbCdEfGhIjKlMnOpQrStUvWx1234'],
      ['shpat_0123456789abcdef0123456789abcdef', 'shpat_0123456789abcdef0123456789abcdef'],
    ];
    for (const [text, secret] of secrets) {
      expect([text, redactPii(text)]).toEqual([text, expect.not.stringContaining(secret)]);
      expect(found(apiKeyDetector, text)).toContain(`API_KEY:${secret}`);
    }
  });

  it('leaves text that only names those vendors or looks a little like their tokens alone', () => {
    for (const text of [
      'glpat- tokens expire; see docs.gitlab.com/ee/user/profile/personal_access_tokens',
      'webhooks go to https://hooks.slack.com/services/ (ask #ops)',
      'AKIA is the prefix of a long-term key id',
      'aws_secret_access_key is unset',
      'hf_hub_download_with_a_much_longer_name_here',
      'the npm_config_cache_directory_override_value',
      'SG.module.definition.name',
      'ya29.short',
      'xapp-store-integration-guide',
    ])
      expect(found(apiKeyDetector, text)).toEqual([]);
  });

  it('ignores kebab-case words and short values', () => {
    expect(
      found(apiKeyDetector, 'sk-learn-is-a-library-for-machine-learning token=abc max_tokens=4096'),
    ).toEqual([]);
  });
});

describe('passwordDetector', () => {
  it('redacts the value after a keyword and a separator', () => {
    expect(
      found(passwordDetector, 'password=abc 密码是 x1y2 pwd: "a b c" password is hunter2'),
    ).toEqual(['PASSWORD:abc', 'PASSWORD:x1y2', 'PASSWORD:a b c', 'PASSWORD:hunter2']);
  });

  // A URL's password ends at the last @ of its authority (WHATWG URL, so ioredis and mysql2 take
  // `redis://:p@ss@host` as password p@ss): the part after its first @ was left in the text.
  it("takes a URL's whole password, @ signs in it too, and nothing past the authority", () => {
    expect(
      found(
        passwordDetector,
        'redis://:p@ss@redis:6379/0 mysql://loom:a@b@c@db:3306/loom https://u:pw@h/x?mail=a@b.com',
      ),
    ).toEqual(['PASSWORD:p@ss', 'PASSWORD:a@b@c', 'PASSWORD:pw']);
    for (const url of ['REDIS_URL=redis://default:S3cr@t-Pa@ss@redis:6379'])
      expect(redactPii(url)).toBe('REDIS_URL=redis://default:[REDACTED_PASSWORD]@redis:6379');
  });

  // A password with a space in it (legal unencoded: ioredis and mysql2 take it so) left the
  // URL detector nothing to match, so the whole password went out, or the part before the
  // space and a "[REDACTED_EMAIL]" for the rest when the host had a domain.
  it("takes a URL's password with spaces in it, and leaves a port before prose alone", () => {
    for (const [text, expected] of [
      ['redis://user:pa ss@host:6379', 'redis://user:[REDACTED_PASSWORD]@host:6379'],
      ['redis://:correct horse battery@redis:6379/0', 'redis://:[REDACTED_PASSWORD]@redis:6379/0'],
      [
        'MYSQL_URL=mysql://loom:pa ss@db.example.com/loom is unreachable',
        'MYSQL_URL=mysql://loom:[REDACTED_PASSWORD]@db.example.com/loom is unreachable',
      ],
      [
        'redis://u:p@h then mail a@b.io',
        'redis://u:[REDACTED_PASSWORD]@h then mail [REDACTED_EMAIL]',
      ],
      [
        'see http://host:8080 or mail bob@example.com',
        'see http://host:8080 or mail [REDACTED_EMAIL]',
      ],
      ['proxy http://a:b, or ask c@example.com', 'proxy http://a:b, or ask [REDACTED_EMAIL]'],
    ])
      expect([text, redactPii(text)]).toEqual([text, expected]);
  });

  // `/`, `?` and `#` ended the password: a password with one left unencoded (as typed into an
  // env var) went out whole, or its part after the sign did, when the URL's error quoted it.
  it("takes a URL's password with /, ? or # in it, and leaves a port before a path alone", () => {
    for (const [text, expected] of [
      [
        'REDIS_URL=redis://:s3cr#et@redis:6379',
        'REDIS_URL=redis://:[REDACTED_PASSWORD]@redis:6379',
      ],
      ['mysql://root:pa/ss@db:3306/x', 'mysql://root:[REDACTED_PASSWORD]@db:3306/x'],
      ['amqp://u:a?b#c/d@mq', 'amqp://u:[REDACTED_PASSWORD]@mq'],
      [
        'http://localhost:3000/login?user=bob@example.com',
        'http://localhost:3000/login?user=[REDACTED_EMAIL]',
      ],
      ['http://host:/x?to=a@b.io', 'http://host:/x?to=[REDACTED_EMAIL]'],
    ])
      expect([text, redactPii(text)]).toEqual([text, expected]);
  });

  // Only a keyword standing alone (or after `_`) counted, so an env var or a field that joins
  // it to a word (libpq's PGPASSWORD, a body's `newPassword` quoted in an error) kept its value.
  it('takes the value after a keyword joined to a word: PGPASSWORD, newPassword, dbPasswd', () => {
    expect(
      found(
        passwordDetector,
        'PGPASSWORD=secret123 {"newPassword":"s3cret!"} dbPasswd: x1 adminPassphrase=a b',
      ),
    ).toEqual(['PASSWORD:secret123', 'PASSWORD:s3cret!', 'PASSWORD:x1', 'PASSWORD:a']);
  });

  it('does not take ordinary words after a bare space or "is"', () => {
    expect(
      found(passwordDetector, 'password reset; the password is required; 密码是必填项'),
    ).toEqual([]);
  });
});
