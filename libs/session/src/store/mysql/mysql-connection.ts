import { readFileSync } from 'fs';

/** The session time zone of every connection: the driver reads and writes times as UTC ('Z'). */
export const LOOM_TIME_ZONE = '+00:00';

/** Where and how Loom connects, from MYSQL_URL (and MYSQL_SSL_CA): the same for every connection. */
export interface MysqlConnectionConfig {
  host: string;
  port: number;
  user: string;
  password?: string;
  database: string;
  /** TLS options for mysql2 (`tls.connect`), or its profile name `Amazon RDS`; absent: no TLS. */
  ssl?: Record<string, unknown> | 'Amazon RDS';
}

/** mysql2 options a URL could set that would break Loom, and why. */
const REFUSED: Record<string, string> = {
  multipleStatements: 'Loom sends one statement per query',
  flags: 'Loom sets the client flags itself',
  charset: "Loom's tables and connections are utf8mb4",
  timezone: 'Loom reads and writes times as UTC',
  dateStrings: 'Loom reads times as dates',
  typeCast: 'Loom reads values as the driver types them',
  supportBigNumbers: 'Loom reads numbers as the driver types them',
  bigNumberStrings: 'Loom reads numbers as the driver types them',
  decimalNumbers: 'Loom reads numbers as the driver types them',
  rowsAsArray: 'Loom reads rows as objects',
  namedPlaceholders: 'Loom uses ? placeholders',
  localInfile: 'Loom never loads local files',
};

/**
 * Parses MYSQL_URL. Its one query option is mysql2's `ssl`: `true` (TLS, the server's
 * certificate checked against Node's CAs), a JSON object of TLS options
 * (`{"rejectUnauthorized":true,"minVersion":"TLSv1.2"}`) or mysql2's profile `Amazon RDS`.
 * MYSQL_SSL_CA, a PEM file, adds its CA and turns TLS on. Throws naming what is wrong.
 */
export function mysqlConnectionConfig(url: string, sslCaFile?: string): MysqlConnectionConfig {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error('MYSQL_URL must look like mysql://user[:pass]@host:port/database');
  }
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  if (parsed.protocol !== 'mysql:' || !parsed.hostname)
    throw new Error('MYSQL_URL must look like mysql://user[:pass]@host:port/database');
  // An `@` past the host: a password with an unencoded `/` ended the authority early, and the
  // rest of it reads as the path. Named without quoting it.
  if (parsed.pathname.includes('@'))
    throw new Error(
      'MYSQL_URL names no valid database: its path holds an @ (percent-encode a / or @ in the password)',
    );
  if (!/^[A-Za-z0-9_$-]{1,64}$/.test(database))
    throw new Error(`MYSQL_URL names no valid database: "${database}"`);
  let ssl: MysqlConnectionConfig['ssl'];
  for (const [name, value] of parsed.searchParams) {
    if (name !== 'ssl')
      throw new Error(
        `MYSQL_URL option ${name} is not allowed: ${REFUSED[name] ?? 'the only option is ssl'}`,
      );
    ssl = sslOption(value);
  }
  if (sslCaFile) ssl = withCa(ssl ?? {}, sslCaFile);
  return {
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: Number(parsed.port || 3306),
    user: decodeURIComponent(parsed.username),
    password: parsed.password ? decodeURIComponent(parsed.password) : undefined,
    database,
    ...(ssl ? { ssl } : {}),
  };
}

function sslOption(value: string): MysqlConnectionConfig['ssl'] {
  if (value === 'true') return {};
  if (value === 'false') return undefined;
  if (value === 'Amazon RDS') return value;
  let options: unknown;
  try {
    options = JSON.parse(value);
  } catch {
    options = undefined;
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw new Error(
      'MYSQL_URL option ssl must be true, false, a JSON object of TLS options or "Amazon RDS"',
    );
  return options as Record<string, unknown>;
}

function withCa(ssl: NonNullable<MysqlConnectionConfig['ssl']>, file: string) {
  if (typeof ssl === 'string' || ssl.ca !== undefined)
    throw new Error('MYSQL_SSL_CA: MYSQL_URL option ssl names its CAs already; keep one of them');
  try {
    return { ...ssl, ca: readFileSync(file, 'utf8') };
  } catch (err) {
    throw new Error(`MYSQL_SSL_CA: cannot read ${file} (${(err as NodeJS.ErrnoException).code})`);
  }
}
