import { mkdtempSync, readFileSync, rmSync, statSync } from 'fs';
import { tmpdir } from 'os';
import { join } from 'path';
import { localTokenSecret } from './local-token-secret';

describe('localTokenSecret', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'loom-token-secret-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('draws a random secret once, keeps it readable by its owner only, and reads it back', () => {
    const data = join(dir, 'data');
    const secret = localTokenSecret(data);
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    expect(localTokenSecret(data)).toBe(secret);
    expect(readFileSync(join(data, 'token-secret'), 'utf8')).toBe(secret);
    expect(statSync(join(data, 'token-secret')).mode & 0o077).toBe(0);
    expect(localTokenSecret(join(dir, 'other'))).not.toBe(secret);
  });
});
