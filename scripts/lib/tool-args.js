// The operator commands' arguments, read by scripts/tool.js before it builds: `--help` or a typo
// must not cost a build. The built command reads them again in full (retire-args.ts,
// import-legacy.ts, migrate.ts); this answers --help and refuses what those refuse by its shape
// alone, with the same usage lines.
const { parseArgs } = require('util');

const TOOLS = {
  'agents:retire': {
    dist: 'dist/apps/orchestrator/src/cli/retire-agent.js',
    usage: 'usage: npm run agents:retire -- [--force] <agentType>…',
    // As retire-args.ts: no type, an unknown option or a malformed type (AGENT_TYPE_PATTERN).
    check(args) {
      const types = args.filter((a) => a !== '--force');
      return (
        types.length > 0 && types.every((t) => !t.startsWith('--') && /^[a-z0-9-]{2,64}$/.test(t))
      );
    },
  },
  'session:import-legacy': {
    dist: 'dist/apps/orchestrator/src/cli/import-legacy.js',
    usage:
      'usage: npm run session:import-legacy -- --tenant <tenantId> --user <userId> <file.json|directory>…',
    // As import-legacy.ts: strict options, none twice, both given, one input at least.
    check(args) {
      let parsed;
      try {
        parsed = parseArgs({
          args,
          strict: true,
          allowPositionals: true,
          options: { tenant: { type: 'string' }, user: { type: 'string' } },
          tokens: true,
        });
      } catch {
        return false;
      }
      const { values, positionals, tokens } = parsed;
      const twice = ['tenant', 'user'].some(
        (name) => tokens.filter((t) => t.kind === 'option' && t.name === name).length > 1,
      );
      return !twice && !!values.tenant && !!values.user && positionals.length > 0;
    },
  },
  'migration:run': {
    dist: 'dist/libs/session/src/cli/migrate.js',
    usage:
      'usage: npm run migration:run   (applies pending migrations to MYSQL_URL, with MYSQL_SSL_CA; no arguments)',
    check: (args) => args.length === 0,
  },
};

/**
 * `{ help: true }`, `{ error }` (the usage, for stderr) or `{ ok: true }` for `npm run <tool>`'s
 * arguments; an unknown tool throws.
 */
function parseToolArgs(tool, args) {
  const spec = TOOLS[tool];
  if (!spec) throw new Error(`unknown tool ${tool}; known: ${Object.keys(TOOLS).join(', ')}`);
  if (args.includes('--help') || args.includes('-h')) return { help: true, usage: spec.usage };
  return spec.check(args) ? { ok: true } : { error: spec.usage };
}

/** Prints the usage and exits (0 for --help, 2 for a refusal); else returns the built command's path. */
function toolArgsOrExit(tool, args) {
  const parsed = parseToolArgs(tool, args);
  if (parsed.help) {
    console.log(parsed.usage);
    process.exit(0);
  }
  if (parsed.error !== undefined) {
    console.error(parsed.error);
    process.exit(2);
  }
  return TOOLS[tool].dist;
}

module.exports = { TOOLS, parseToolArgs, toolArgsOrExit };
