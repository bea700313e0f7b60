#!/usr/bin/env node
// npm run token -- <user> <tenant> [hours]: an API token (HS256, claims sub and tid) signed with
// LOOM_JWT_SECRET, for curl and scripts. The embedded profile without LOOM_JWT_SECRET uses its
// built-in local secret; say LOOM_PROFILE=embedded to get a token for it.
const { JwtService } = require('@nestjs/jwt');

const EMBEDDED_JWT_SECRET = 'embedded-profile-only-jwt-secret'; // apps/orchestrator/src/app.module.ts
const [sub, tid, hours = '1'] = process.argv.slice(2);
if (!sub || !tid || !/^\d+(\.\d+)?$/.test(hours)) {
  console.error('usage: npm run token -- <user id> <tenant id> [hours, default 1]');
  process.exit(2);
}
const secret =
  process.env.LOOM_JWT_SECRET ||
  (process.env.LOOM_PROFILE === 'embedded' ? EMBEDDED_JWT_SECRET : undefined);
if (!secret) {
  console.error('token: set LOOM_JWT_SECRET (the orchestrator\'s), or LOOM_PROFILE=embedded');
  process.exit(2);
}
const token = new JwtService({ secret }).sign(
  { sub, tid },
  { algorithm: 'HS256', expiresIn: Math.round(Number(hours) * 3600) },
);
process.stdout.write(`${token}\n`);
