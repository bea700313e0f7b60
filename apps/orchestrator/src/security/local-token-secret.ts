import { randomBytes } from 'crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'fs';
import { join } from 'path';

/** The file, in the embedded profile's data directory, that holds its API token secret. */
export const LOCAL_TOKEN_SECRET_FILE = 'token-secret';

/**
 * The embedded profile's API token secret when LOOM_JWT_SECRET is not set: random, drawn at the
 * first start and kept in `<dataDir>/token-secret` (mode 0600, like the conversations beside it),
 * where `npm run token` finds it. Whoever may read it may read the conversations themselves; a
 * secret in the source would let any local user mint tokens for any tenant.
 */
export function localTokenSecret(dataDir: string): string {
  const file = join(dataDir, LOCAL_TOKEN_SECRET_FILE);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  if (!existsSync(file)) draw(file);
  const secret = readFileSync(file, 'utf8').trim();
  if (secret.length < 16) throw new Error(`${file}: not a token secret (remove it to draw anew)`);
  return secret;
}

/**
 * Writes a new secret whole under a name of its own, then links it into place: a start beside
 * this one (or after one killed mid-write) never reads a file half written, and of two starts
 * drawing at once, the first link wins for both.
 */
function draw(file: string): void {
  const draft = `${file}.${process.pid}.${randomBytes(6).toString('hex')}`;
  writeFileSync(draft, randomBytes(32).toString('hex'), { flag: 'wx', mode: 0o600 });
  try {
    linkSync(draft, file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  } finally {
    rmSync(draft, { force: true });
  }
}
