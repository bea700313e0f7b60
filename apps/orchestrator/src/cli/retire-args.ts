import { AGENT_TYPE_PATTERN } from '@loom/agent-kit';

export const RETIRE_USAGE = 'usage: npm run agents:retire -- [--force] <agentType>…';

/**
 * `npm run agents:retire`'s arguments: `help` for --help/-h, null for a wrong invocation (no
 * type, an option it does not know, which the type pattern alone would take for a type, or a
 * malformed type), else the types and whether to record ones the catalog never saw.
 * scripts/lib/tool-args.js refuses the same shapes before `npm run` builds: keep the two alike.
 */
export function parseRetireArgs(
  args: string[],
): { help: true } | { help: false; force: boolean; types: string[] } | null {
  if (args.includes('--help') || args.includes('-h')) return { help: true };
  const force = args.includes('--force');
  // A type named twice is retired and drained once (and said once).
  const types = [...new Set(args.filter((a) => a !== '--force'))];
  if (types.length === 0 || types.some((t) => t.startsWith('--') || !AGENT_TYPE_PATTERN.test(t)))
    return null;
  return { help: false, force, types };
}
