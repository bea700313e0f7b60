import { parseRetireArgs, RETIRE_USAGE } from '../apps/orchestrator/src/cli/retire-args';

// scripts/lib/tool-args.js reads an operator command's arguments before `npm run` builds it; the
// built command reads them again. The two must agree, or a call is refused by one and taken by
// the other: for agents:retire, against the command's own parser.
const { parseToolArgs } = require('../scripts/lib/tool-args.js') as {
  parseToolArgs(
    tool: string,
    args: string[],
  ): { help?: true; usage?: string; error?: string; ok?: true };
};

describe('operator command arguments read before the build', () => {
  const calls = [
    [],
    ['--help'],
    ['-h'],
    ['tax-law'],
    ['tax-law', 'tax-law'],
    ['--force', 'tax-law'],
    ['tax-law', '--force', 'vat-law'],
    ['--forse', 'tax-law'],
    ['--force'],
    ['Tax-Law'],
    ['x'],
    ['a'.repeat(64)],
    ['a'.repeat(65)],
    ['tax_law'],
    ['tax-agent-law'],
  ];

  it.each(calls.map((c) => [c.join(' ') || '(none)', c]))(
    'agents:retire %s: refused or taken as the built command does',
    (_, args) => {
      const before = parseToolArgs('agents:retire', args as string[]);
      const built = parseRetireArgs(args as string[]);
      if (built === null) expect(before.error).toBe(RETIRE_USAGE);
      else if (built.help) expect(before).toEqual({ help: true, usage: RETIRE_USAGE });
      else expect(before).toEqual({ ok: true });
    },
  );
});
