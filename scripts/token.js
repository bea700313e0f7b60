#!/usr/bin/env node
// npm run token -- <user> <tenant> [hours]: an API token (HS256, claims sub and tid) signed with
// LOOM_JWT_SECRET, for curl and scripts. The embedded profile without LOOM_JWT_SECRET uses the
// random secret it keeps in LOOM_DATA_DIR (default .loom-data) as `token-secret`; say
// LOOM_PROFILE=embedded to get a token for it (apps/orchestrator/src/security/local-token-secret.ts).
const fs = require('fs');
const path = require('path');
const { JwtService } = require('@nestjs/jwt');

const args = process.argv.slice(2);
const USAGE = 'usage: npm run token -- <user id> <tenant id> [hours, default 1]';
if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
  console.log(USAGE);
  process.exit(0);
}
// Three arguments at most, none a flag: `--user alice` would otherwise sign a token for user
// "--user" of tenant "alice", and an extra argument would be dropped without a word.
if (args.length > 3 || args.some((a) => a.startsWith('--'))) {
  console.error(USAGE);
  process.exit(2);
}
const [sub, tid, hoursArg] = args;
// The orchestrator answers 401 to a token whose exp is further ahead than LOOM_JWT_MAX_AGE_S
// (apps/orchestrator/src/auth/token-verifier.ts): the default hour is shortened to it.
// Read by the apps' rule (libs/agent-kit/src/config/loom-env.ts, toInt then @IsInt() @Min(0)):
// unset or empty is 0; otherwise decimal text, blanks around it allowed (`600`, ` 600.0 `, `+600`),
// that is a whole number of at least 0. What the orchestrator would refuse at start is refused here.
const maxAgeRaw = process.env.LOOM_JWT_MAX_AGE_S ?? '';
const maxAgeText = maxAgeRaw.trim();
const maxAgeS =
  maxAgeRaw === '' ? 0 : /^[+-]?(\d+\.?\d*|\.\d+)$/.test(maxAgeText) ? Number(maxAgeText) : NaN;
if (!Number.isInteger(maxAgeS) || maxAgeS < 0) {
  console.error('token: LOOM_JWT_MAX_AGE_S must be a whole number of seconds, 0 or more');
  process.exit(2);
}
const hours = hoursArg ?? (maxAgeS > 0 ? String(Math.min(3600, maxAgeS) / 3600) : '1');
if (!sub || !tid || !/^\d+(\.\d+)?$/.test(hours)) {
  console.error(USAGE);
  process.exit(2);
}
// What the orchestrator's guard accepts (libs/session/src/ids.ts PRINCIPAL_PATTERN): a token it
// would answer 401 is refused here, saying why.
const PRINCIPAL = /^[A-Za-z0-9_.@|:+-]{1,128}$/;
for (const [what, id] of [
  ['user id', sub],
  ['tenant id', tid],
])
  if (!PRINCIPAL.test(id)) {
    console.error(
      `token: invalid ${what}: letters, digits and _ . @ | : + - only, 1-128 characters`,
    );
    process.exit(2);
  }
if (tid.startsWith('_')) {
  console.error('token: tenant ids starting with _ are reserved for Loom');
  process.exit(2);
}
if (Math.round(Number(hours) * 3600) < 1) {
  console.error('token: hours must be more than 0 (the token would already have expired)');
  process.exit(2);
}
if (maxAgeS > 0 && Math.round(Number(hours) * 3600) > maxAgeS) {
  // Rounded down to 4 decimals, a number the user can type back (600 s: 0.1666, not 0.1666…6).
  const most = Math.floor((maxAgeS / 3600) * 10_000) / 10_000;
  console.error(
    `token: hours must be at most ${most} (LOOM_JWT_MAX_AGE_S=${maxAgeS}: the orchestrator refuses a longer-lived token)`,
  );
  process.exit(2);
}
/** The embedded profile's own secret, or undefined when it has not started in that directory yet. */
function embeddedSecret() {
  // A relative LOOM_DATA_DIR is the embedded app's working directory's: `npm run token` runs in
  // the repository root, so the path looked at is said in full, with how to point elsewhere.
  const file = path.resolve(process.env.LOOM_DATA_DIR || '.loom-data', 'token-secret');
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    console.error(
      `token: no ${file}: start the embedded profile once first; if it was started in another ` +
        `directory or with its own LOOM_DATA_DIR, give that: LOOM_DATA_DIR=/path/to/.loom-data`,
    );
    process.exit(2);
  }
}
const secret =
  process.env.LOOM_JWT_SECRET ||
  (process.env.LOOM_PROFILE === 'embedded' ? embeddedSecret() : undefined);
if (!secret) {
  console.error("token: set LOOM_JWT_SECRET (the orchestrator's), or LOOM_PROFILE=embedded");
  process.exit(2);
}
const token = new JwtService({ secret }).sign(
  { sub, tid },
  { algorithm: 'HS256', expiresIn: Math.round(Number(hours) * 3600) },
);
process.stdout.write(`${token}\n`);
