import { existsSync } from 'fs';
import { dirname, join } from 'path';
import { formatReport, runChaos } from './run-chaos';

interface ChaosArgs {
  minutes: number;
  seed: number;
  conversations: number;
  redisCluster: boolean;
}

/** scripts/lib/chaos-args.js (read by scripts/chaos.js before it builds), from src or dist/. */
function chaosArgs(): { chaosArgsOrExit(args: string[]): ChaosArgs } {
  let dir = __dirname;
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir);
  return require(join(dir, 'scripts', 'lib', 'chaos-args.js'));
}

/**
 * `npm run chaos -- [--minutes N] [--seed S] [--conversations C] [--redis-cluster]`: exits 1
 * when an invariant broke.
 */
async function main(): Promise<void> {
  const { minutes, seed, conversations, redisCluster } = chaosArgs().chaosArgsOrExit(
    process.argv.slice(2),
  );
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
