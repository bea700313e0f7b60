import { formatReport, runChaos } from './run-chaos';

const USAGE =
  'usage: npm run chaos -- [--minutes N] [--seed S] [--conversations C] [--redis-cluster]';
/** Options followed by a value, and options alone. */
const VALUED = ['--minutes', '--seed', '--conversations'];
const FLAGS = ['--redis-cluster'];

/**
 * `npm run chaos -- [--minutes N] [--seed S] [--conversations C] [--redis-cluster]`: exits 1
 * when an invariant broke.
 */
async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    console.log(USAGE);
    process.exit(0);
  }
  // A mistyped option (--minute 10), one left without its value (`--seed` at the end) or one
  // given twice would otherwise run a 2-minute audit of a random or unintended seed.
  const seen = new Set<string>();
  const refuse = (why: string) => {
    console.error(`chaos: ${why}; ${USAGE}`);
    process.exit(2);
  };
  for (let i = 0; i < args.length; i++) {
    if (!VALUED.includes(args[i]) && !FLAGS.includes(args[i])) refuse(`unknown option ${args[i]}`);
    if (seen.has(args[i])) refuse(`${args[i]} given twice`);
    seen.add(args[i]);
    if (!VALUED.includes(args[i])) continue;
    if (i + 1 >= args.length || args[i + 1].startsWith('--')) refuse(`${args[i]} needs a value`);
    i++;
  }
  const opt = (name: string) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const minutes = Number(opt('minutes') ?? 2);
  const seed = Number(opt('seed') ?? Math.floor(Math.random() * 1_000_000));
  const conversations = Number(opt('conversations') ?? 6);
  const redisCluster = args.includes('--redis-cluster');
  if (!(minutes > 0) || !Number.isInteger(seed) || !(conversations > 0)) {
    console.error(USAGE);
    process.exit(2);
  }
  const report = await runChaos({
    seed,
    durationMs: minutes * 60_000,
    conversations,
    redisCluster,
    log: (l) => console.log(l),
  });
  console.log(formatReport(report));
  process.exit(report.violations.length ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
