// `npm run chaos`'s arguments, read by scripts/chaos.js before it builds (a --help or a typo must
// not cost a build) and by the audit itself (libs/testing/src/chaos/cli.ts): one reading for both.
const USAGE =
  'usage: npm run chaos -- [--minutes N] [--seed S] [--conversations C] [--redis-cluster]';
/** Options followed by a value, and options alone. */
const VALUED = ['--minutes', '--seed', '--conversations'];
const FLAGS = ['--redis-cluster'];

/**
 * `{ help: true }`, `{ error }` (one line, usage included) or the options. A mistyped option
 * (--minute 10), one left without its value (`--seed` at the end) or one given twice would
 * otherwise run a 2-minute audit of a random or unintended seed.
 */
function parseChaosArgs(args) {
  if (args.includes('--help') || args.includes('-h')) return { help: true };
  const refuse = (why) => ({ error: `chaos: ${why}; ${USAGE}` });
  const seen = new Set();
  for (let i = 0; i < args.length; i++) {
    if (!VALUED.includes(args[i]) && !FLAGS.includes(args[i]))
      return refuse(`unknown option ${args[i]}`);
    if (seen.has(args[i])) return refuse(`${args[i]} given twice`);
    seen.add(args[i]);
    if (!VALUED.includes(args[i])) continue;
    if (i + 1 >= args.length || args[i + 1].startsWith('--'))
      return refuse(`${args[i]} needs a value`);
    i++;
  }
  const opt = (name) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const minutes = Number(opt('minutes') ?? 2);
  const seed = Number(opt('seed') ?? Math.floor(Math.random() * 1_000_000));
  const conversations = Number(opt('conversations') ?? 6);
  if (!(minutes > 0)) return refuse('--minutes must be more than 0');
  if (!Number.isInteger(seed)) return refuse('--seed must be a whole number');
  if (!(conversations > 0)) return refuse('--conversations must be more than 0');
  return {
    help: false,
    minutes,
    seed,
    conversations,
    redisCluster: args.includes('--redis-cluster'),
  };
}

/** The options of `args`; after printing the usage (--help, exit 0) or a refusal (exit 2), none. */
function chaosArgsOrExit(args) {
  const parsed = parseChaosArgs(args);
  if (parsed.help) {
    console.log(USAGE);
    process.exit(0);
  }
  if (parsed.error !== undefined) {
    console.error(parsed.error);
    process.exit(2);
  }
  return parsed;
}

module.exports = { USAGE, parseChaosArgs, chaosArgsOrExit };
