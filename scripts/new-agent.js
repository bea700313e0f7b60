#!/usr/bin/env node
// npm run new:agent <name> [-- --keywords "税,tax" --description "…" --dir <path>]: scaffolds apps/<name>-agent, a working
// specialist that registers itself and is routed by the planner in the next turn; no orchestrator change.
// Every file is generated and formatted in memory first; the folder is written only when all of them are,
// and removed again if writing fails, so a failed run leaves nothing behind.
const fs = require('fs');
const path = require('path');
const { root } = require('./transpile');

const USAGE =
  'usage: npm run new:agent <name> [-- --keywords "k1,k2" --description "text" --dir <path>]';
// Dash-separated words of lower-case letters and digits, so the class and constant names derived
// from it are identifiers (tax-law → TaxLawHandler, TAX_LAW_DESCRIPTOR).
const NAME = /^[a-z][a-z0-9]*(-[a-z0-9]+)*$/;
const NAME_LENGTH = { min: 2, max: 41 };
const OPTIONS = ['--keywords', '--description', '--dir'];

/** One line on stderr and exit code 2: a wrong invocation, nothing written. */
function fail(message) {
  console.error(`new:agent: ${message}`);
  process.exit(2);
}

function parseArgs(argv) {
  const positional = [];
  const opts = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    if (!OPTIONS.includes(flag)) fail(`unknown option ${flag} (options: ${OPTIONS.join(', ')})`);
    if (flag in opts) fail(`${flag} given twice`);
    const value = eq < 0 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined || value.startsWith('--') || !value.trim())
      fail(`${flag} needs a value`);
    opts[flag] = value;
  }
  if (positional.length === 0) fail(`missing agent name; ${USAGE}`);
  if (positional.length > 1)
    fail(
      `one agent name only, got ${positional.map((p) => JSON.stringify(p)).join(' ')}` +
        ` (words are joined with dashes: ${positional.join('-').toLowerCase()}; options go after --)`,
    );
  return { name: positional[0], opts };
}

// npm takes an option given before `--` (npm run new:agent vat --keywords=a,b) as its own config
// and leaves it in the environment: new:agent would never see it, and scaffold without it.
for (const option of ['keywords', 'dir'])
  if (process.env[`npm_config_${option}`] !== undefined)
    fail(
      `npm took --${option} as its own: give new:agent's options after --` +
        ` (npm run new:agent <name> -- --${option} …)`,
    );
const { name, opts } = parseArgs(process.argv.slice(2));
if (
  !NAME.test(name) ||
  name.length < NAME_LENGTH.min ||
  name.length > NAME_LENGTH.max ||
  name.endsWith('-agent')
)
  fail(
    `invalid name ${JSON.stringify(name)}: lower-case letters and digits, words joined by single dashes, ` +
      `${NAME_LENGTH.min}-${NAME_LENGTH.max} characters, starting with a letter, without "-agent" (e.g. tax-law)`,
  );
// Its handler class would be AgentHandler, shadowing the agent kit's interface it implements.
if (name === 'agent')
  fail(
    'invalid name "agent": its handler class would be AgentHandler, the agent kit\'s own interface',
  );
const keywords = (opts['--keywords'] ?? name)
  .split(',')
  .map((k) => k.trim())
  .filter(Boolean);
if (keywords.length === 0) fail('--keywords lists no keyword');
// The agent kit's descriptor rules (libs/agent-kit/src/contracts/agent-descriptor-check.ts):
// an agent outside them would not start.
if (keywords.length > 200) fail(`--keywords lists ${keywords.length} keywords (at most 200)`);
if (keywords.some((k) => k.length > 100)) fail('--keywords: a keyword is at most 100 characters');
const description = opts['--description'] ?? `${name} specialist`;
if (description.length > 1000) fail('--description is at most 1000 characters');
const app = `${name}-agent`;
const defaultDir = path.join(root, 'apps', app);
// --dir writes the app elsewhere (tests scaffold into a temporary folder and leave apps/ alone).
const appDir = opts['--dir'] ? path.resolve(opts['--dir']) : defaultDir;
const inApps = appDir === defaultDir;
/** Relative to the repository when inside it, else absolute. */
const shown = (p) => {
  const rel = path.relative(root, p);
  return rel && !rel.startsWith('..') && !path.isAbsolute(rel) ? rel : p;
};
if (fs.existsSync(appDir)) fail(`${shown(appDir)} already exists`);

const pascal = name.replace(/(^|-)([a-z0-9])/g, (_, __, c) => c.toUpperCase());
const upper = name.replace(/-/g, '_').toUpperCase();
const constant = `${upper}_DESCRIPTOR`;
const notesKey = `${upper}_NOTES_KEY`;
// What the answer calls the agent: "[Tax-law specialist] …" offline, "You are Tax-law specialist."
// to a model. Derived from the name, not the description (a description is not a role).
const role = {
  en: `${name[0].toUpperCase()}${name.slice(1)} specialist`,
  zh: `${name} 专家`,
};

const files = {
  [`src/${name}.descriptor.ts`]: `import { AgentRegistration } from '@loom/agent-kit';

/** What the planner and GET /v1/agents know about this agent. */
export const ${constant}: AgentRegistration = {
  agentType: '${name}',
  description: ${JSON.stringify(description)},
  role: 'specialist',
  intents: ['${name}'],
  keywords: ${JSON.stringify(keywords)},
};
`,
  [`src/${name}.handler.ts`]: `import { Injectable } from '@nestjs/common';
import { AgentHandler, AgentTools, answerFromContext } from '@loom/agent-kit';
import { SessionContext } from '@loom/session';

/**
 * What the answer calls this agent, per language: offline it opens with "[${role.en}]",
 * and a model is told "You are ${role.en}.".
 */
export const ${upper}_ROLE = { en: '${role.en}', zh: '${role.zh}' } as const;

/** Its task-shared key: agents after it in the task read it; GET /v1/tasks/:id shows it. */
export const ${notesKey} = '${name}.notes';

/** Answers with the conversation so far and the task-shared data (research, other agents). */
@Injectable()
export class ${pascal}Handler implements AgentHandler {
  async handle(ctx: SessionContext, tools: AgentTools) {
    // Example, replace with the agent's own logic. What it may read: the turns before this
    // question (ctx.history, within a token budget; ctx.summary covers older ones), ctx.question,
    // and what other agents shared in this task (the statutes legal-research found).
    const earlierQuestions = ctx.history.filter((m) => m.role === 'user').length;
    const statutes = ctx.getSharedData<unknown[]>('research.statutes') ?? [];

    // The default answer: the model, given all of the above (offline, a template that quotes it).
    // tools.signal aborts when the execution is cancelled (past AGENT_MAX_EXECUTION_MS, or the
    // agent stopping): tools.llm's calls end with it; pass it to anything else the handler
    // awaits, e.g. fetch(url, { signal: tools.signal }).
    const { answer, usage } = await answerFromContext(ctx, tools, ${upper}_ROLE[tools.language]);

    // A key of its own in the task-shared data (ctx.remember keeps private notes instead); every
    // key written is listed in sharedKeysWritten.
    await ctx.putSharedData(${notesKey}, { earlierQuestions, statutesSeen: statutes.length });
    return { answer, usage, sharedKeysWritten: [${notesKey}] };
  }
}
`,
  'src/agent.ts': `import { AgentDefinition } from '@loom/agent-kit';
import { ${constant} } from './${name}.descriptor';
import { ${pascal}Handler } from './${name}.handler';

/**
 * Started as its own process by main.ts, and beside every other agent by the embedded profile.
 * A handler with dependencies of its own lists them here: \`providers: [TaxRates]\`, \`imports: [HttpModule]\`.
 */
export const AGENT: AgentDefinition = { descriptor: ${constant}, handler: ${pascal}Handler };
`,
  'src/main.ts': `import 'reflect-metadata';
import { runAgent } from '@loom/agent-kit';
import { AGENT } from './agent';

runAgent(AGENT);
`,
  [`test/${app}.e2e-spec.ts`]: `import { AgentHarness } from '@loom/testing';
import { AGENT } from '../src/agent';
import { ${notesKey} } from '../src/${name}.handler';

// The agent in-process on the test MySQL and Redis (offline model), as the orchestrator calls it.
// Replace the questions with ones from the agent's domain as its handler grows.
describe('${name} agent (real Redis Streams client, real MySQL and Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(AGENT);
  });
  afterAll(() => agent?.stop());

  it('answers with the conversation so far and the shared research, and shares its notes', async () => {
    const task = await agent.seed(
      owner,
      ['Some background on my situation', 'What exactly is the problem?'],
      'What should I do now?',
    );
    await agent.tasks.putShared(owner, task.conversationId, task.taskId, {
      key: 'research.statutes',
      value: [{ title: { zh: '《民法典》第一条', en: 'Civil Code, Article 1' } }],
      writer: 'legal-research',
      updatedAt: new Date().toISOString(),
    });
    const result = await agent.execute(agent.request(owner, task, undefined, 'en'));
    expect(result.agentType).toBe('${name}');
    expect(result.context.historyMessages).toBe(2);
    expect(result.output).toContain('[${role.en}]');
    expect(result.output).toContain('Some background on my situation');
    expect(result.output).toContain('Civil Code, Article 1');
    expect(result.sharedKeysWritten).toEqual([${notesKey}]);
    const shared = await agent.tasks.shared(owner, task.conversationId, task.taskId);
    expect(shared[${notesKey}]).toMatchObject({
      writer: '${name}',
      value: { earlierQuestions: 1, statutesSeen: 1 },
    });
  });

  it('answers a question in Chinese under its Chinese role', async () => {
    const task = await agent.seed(owner, [], '我现在该怎么办?');
    const result = await agent.execute(agent.request(owner, task));
    expect(result.context.historyMessages).toBe(0);
    expect(result.output).toContain('【${role.zh}】');
  });
});
`,
  'tsconfig.app.json': `${JSON.stringify(
    {
      extends: '../../tsconfig.json',
      compilerOptions: { outDir: `../../dist/apps/${app}` },
      include: ['src/**/*', '../../libs/**/*'],
      exclude: ['node_modules', 'dist', 'test', '**/*spec.ts'],
    },
    null,
    2,
  )}\n`,
};

/** In the repository's own style (npm test starts with prettier --check), when prettier is installed. */
async function formatted(file, text) {
  let prettier;
  try {
    prettier = require('prettier');
  } catch {
    return text;
  }
  const options = (await prettier.resolveConfig(file)) ?? {};
  return prettier.format(text, { ...options, filepath: file });
}

/** Writes through a temporary file, so a failed write leaves the old content. */
function replaceFile(file, text) {
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, text);
    fs.renameSync(tmp, file);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

async function main() {
  // Everything in memory first: a file that does not format (or parse) writes nothing.
  const out = [];
  for (const [rel, text] of Object.entries(files)) {
    const file = path.join(appDir, rel);
    try {
      out.push([file, await formatted(file, text)]);
    } catch (err) {
      throw new Error(`could not format ${rel}: ${String(err.message).split('\n')[0]}`);
    }
  }

  const cliPath = path.join(root, 'nest-cli.json');
  let cliText;
  if (inApps) {
    const cli = JSON.parse(fs.readFileSync(cliPath, 'utf8'));
    cli.projects[app] = {
      type: 'application',
      root: `apps/${app}`,
      entryFile: 'main',
      sourceRoot: `apps/${app}/src`,
      compilerOptions: { tsConfigPath: `apps/${app}/tsconfig.app.json` },
    };
    cliText = `${JSON.stringify(cli, null, 2)}\n`;
  }

  fs.mkdirSync(path.dirname(appDir), { recursive: true });
  fs.mkdirSync(appDir); // fails if it appeared meanwhile: never writes into someone else's folder
  try {
    for (const [file, text] of out) {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, text);
    }
    if (cliText) replaceFile(cliPath, cliText);
  } catch (err) {
    fs.rmSync(appDir, { recursive: true, force: true });
    throw err;
  }

  const written = out.map(([file]) => path.relative(appDir, file)).join(', ');
  console.log(`created ${shown(appDir)}: ${written}
keywords: ${keywords.join(', ')}`);
  if (inApps)
    console.log(`added project ${app} to nest-cli.json
next: npm run build && node dist/apps/${app}/main.js   (npm run start:all and the embedded profile start it too)
      it registers itself; the planner routes matching questions to it in the next turn.
test: npx jest apps/${app} --selectProjects e2e   (npm test runs it too)`);
  else
    console.log(`nest-cli.json not changed (--dir): npm run build and npm test look only in apps/`);
}

main().catch((err) => {
  console.error(`new:agent: ${err.message}`);
  process.exit(1);
});
