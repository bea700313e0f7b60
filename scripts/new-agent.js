#!/usr/bin/env node
// npm run new:agent <name> [-- --keywords "税,tax" --description "…" --dir <path>]: scaffolds apps/<name>-agent, a working
// specialist that registers itself and is routed by the planner in the next turn; no orchestrator change.
const fs = require('fs');
const path = require('path');
const { root } = require('./transpile');

function usage(message) {
  console.error(
    `new:agent: ${message}\nusage: npm run new:agent <name> [-- --keywords "k1,k2" --description "text"]`,
  );
  process.exit(2);
}

const args = process.argv.slice(2);
const name = args.find((a) => !a.startsWith('--') && !args[args.indexOf(a) - 1]?.startsWith('--'));
const flag = (f) => (args.includes(f) ? args[args.indexOf(f) + 1] : undefined);
if (!name) usage('missing agent name');
if (!/^[a-z][a-z0-9-]{1,40}$/.test(name) || name.endsWith('-agent'))
  usage('the name must be lower-case letters, digits and dashes (without "-agent")');
const keywords = (flag('--keywords') ?? name)
  .split(',')
  .map((k) => k.trim())
  .filter(Boolean);
const description = flag('--description') ?? `${name} specialist`;
// --dir writes the app elsewhere (tests scaffold into a temporary folder and leave apps/ alone).
const appDir = flag('--dir')
  ? path.resolve(flag('--dir'))
  : path.join(root, 'apps', `${name}-agent`);
if (fs.existsSync(appDir)) usage(`${path.relative(root, appDir)} already exists`);

const camel = name.replace(/(^|-)([a-z0-9])/g, (_, __, c) => c.toUpperCase());
const constant = `${name.replace(/-/g, '_').toUpperCase()}_DESCRIPTOR`;
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

/** Answers with the conversation so far and the task-shared data (research, other agents). */
@Injectable()
export class ${camel}Handler implements AgentHandler {
  handle(ctx: SessionContext, tools: AgentTools) {
    return answerFromContext(ctx, tools, ${JSON.stringify(description)});
  }
}
`,
  'src/agent.ts': `import { AgentDefinition } from '@loom/agent-kit';
import { ${constant} } from './${name}.descriptor';
import { ${camel}Handler } from './${name}.handler';

/** Started as its own process by main.ts, and beside every other agent by the embedded profile. */
export const AGENT: AgentDefinition = { descriptor: ${constant}, handler: ${camel}Handler };
`,
  'src/main.ts': `import 'reflect-metadata';
import { bootstrapAgent } from '@loom/agent-kit';
import { AGENT } from './agent';

void bootstrapAgent(AGENT.descriptor, AGENT.handler);
`,
  'tsconfig.app.json': `${JSON.stringify(
    {
      extends: '../../tsconfig.json',
      compilerOptions: { outDir: `../../dist/apps/${name}-agent` },
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

async function main() {
  for (const [rel, text] of Object.entries(files)) {
    const file = path.join(appDir, rel);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, await formatted(file, text));
  }

  const cliPath = path.join(root, 'nest-cli.json');
  const cli = JSON.parse(fs.readFileSync(cliPath, 'utf8'));
  cli.projects[`${name}-agent`] = {
    type: 'application',
    root: `apps/${name}-agent`,
    entryFile: 'main',
    sourceRoot: `apps/${name}-agent/src`,
    compilerOptions: { tsConfigPath: `apps/${name}-agent/tsconfig.app.json` },
  };
  if (!flag('--dir')) fs.writeFileSync(cliPath, `${JSON.stringify(cli, null, 2)}\n`);

  console.log(`created apps/${name}-agent (keywords: ${keywords.join(', ')})
next: npm run build && node dist/apps/${name}-agent/main.js   (npm run start:all and the embedded profile start it too)
      it registers itself; the planner routes matching questions to it in the next turn.`);
}

main().catch((err) => {
  console.error(`new:agent: ${err.message}`);
  process.exit(1);
});
