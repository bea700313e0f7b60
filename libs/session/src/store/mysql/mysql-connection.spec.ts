import { mkdtempSync, rmSync, writeFileSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { mysqlConnectionConfig } from './mysql-connection';

describe('mysqlConnectionConfig', () => {
  const base = 'mysql://loom:p%40ss@db.example.com:3307/loom';

  it('reads the server, credentials and database, without TLS by default', () => {
    expect(mysqlConnectionConfig(base)).toEqual({
      host: 'db.example.com',
      port: 3307,
      user: 'loom',
      password: 'p@ss',
      database: 'loom',
    });
    expect(mysqlConnectionConfig('mysql://root@127.0.0.1/loom')).toEqual({
      host: '127.0.0.1',
      port: 3306,
      user: 'root',
      password: undefined,
      database: 'loom',
    });
  });

  it('takes ssl as mysql2 does: true, false, a JSON object of TLS options or "Amazon RDS"', () => {
    const ssl = (query: string) => mysqlConnectionConfig(`${base}?${query}`).ssl;
    expect(ssl('ssl=true')).toEqual({});
    expect(ssl('ssl=false')).toBeUndefined();
    expect(ssl('ssl={"rejectUnauthorized":true,"minVersion":"TLSv1.2"}')).toEqual({
      rejectUnauthorized: true,
      minVersion: 'TLSv1.2',
    });
    expect(ssl(`ssl=${encodeURIComponent('{"rejectUnauthorized":false}')}`)).toEqual({
      rejectUnauthorized: false,
    });
    expect(ssl('ssl=Amazon%20RDS')).toBe('Amazon RDS');
    for (const bad of ['ssl=yes', 'ssl=[1]', 'ssl=null', 'ssl=1'])
      expect(() => ssl(bad)).toThrow(
        'MYSQL_URL option ssl must be true, false, a JSON object of TLS options or "Amazon RDS"',
      );
  });

  it('refuses every other option, naming it and why', () => {
    const refused = (query: string) => () => mysqlConnectionConfig(`${base}?ssl=true&${query}`);
    expect(refused('multipleStatements=true')).toThrow(
      'MYSQL_URL option multipleStatements is not allowed: Loom sends one statement per query',
    );
    expect(refused('charset=latin1')).toThrow(
      "MYSQL_URL option charset is not allowed: Loom's tables and connections are utf8mb4",
    );
    expect(refused('timezone=%2B05:00')).toThrow(
      'MYSQL_URL option timezone is not allowed: Loom reads and writes times as UTC',
    );
    expect(refused('sslmode=require')).toThrow(
      'MYSQL_URL option sslmode is not allowed: the only option is ssl',
    );
  });

  it('MYSQL_SSL_CA adds its CA and turns TLS on; a CA named twice or a missing file is refused', () => {
    const dir = mkdtempSync(join(tmpdir(), 'loom-ca-'));
    try {
      const ca = join(dir, 'ca.pem');
      writeFileSync(ca, 'PEM');
      expect(mysqlConnectionConfig(base, ca).ssl).toEqual({ ca: 'PEM' });
      expect(mysqlConnectionConfig(`${base}?ssl={"rejectUnauthorized":false}`, ca).ssl).toEqual({
        ca: 'PEM',
        rejectUnauthorized: false,
      });
      expect(() => mysqlConnectionConfig(`${base}?ssl=Amazon%20RDS`, ca)).toThrow(
        'MYSQL_SSL_CA: MYSQL_URL option ssl names its CAs already; keep one of them',
      );
      expect(() => mysqlConnectionConfig(base, join(dir, 'none.pem'))).toThrow(
        `MYSQL_SSL_CA: cannot read ${join(dir, 'none.pem')} (ENOENT)`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a URL that names no valid database', () => {
    expect(() => mysqlConnectionConfig('mysql://root@127.0.0.1:3306/')).toThrow(
      'MYSQL_URL names no valid database: ""',
    );
  });

  // A password with an unencoded "/" (common in generated ones) after digits or nothing ends the
  // authority there: the rest of the password became the "database" the error quoted.
  it('names no part of a password that ended up in the database name', () => {
    for (const url of [
      'mysql://loom:/kP9+qzT@db:3306/loom',
      'mysql://loom:2024/kP9+qzT@db:3306/loom',
    ]) {
      let message = '';
      try {
        mysqlConnectionConfig(url);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(/^MYSQL_URL /);
      expect(message).not.toContain('kP9+qzT');
    }
  });
});
