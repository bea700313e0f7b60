// docker-compose.yml against docs/configuration.md: Compose passes every variable of the table
// through to the apps but those the docs name as its own (REDIS_URL, MYSQL_URL, PORT, the embedded
// profile's and the Redis Cluster's), so a value set in .env reaches the apps. Pure fs: a unit test.
import * as fs from 'fs';
import * as path from 'path';

const root = path.resolve(__dirname, '..');
const read = (file: string) => fs.readFileSync(path.join(root, file), 'utf8');

/** The variables of the configuration table (a row may name several: `A`, `B`). */
function documentedVariables(): string[] {
  const rows = read('docs/configuration.md')
    .split('\n')
    .filter((line) => /^\| `[A-Z]/.test(line));
  return rows.flatMap((row) => row.split('|')[1].match(/[A-Z][A-Z0-9_]+/g) ?? []);
}

/** The keys of a block of docker-compose.yml: the lines after `header`, more indented than it. */
function blockKeys(compose: string[], header: RegExp): string[] {
  const start = compose.findIndex((line) => header.test(line));
  expect(start).toBeGreaterThanOrEqual(0);
  const indent = /^ */.exec(compose[start])![0].length;
  const keys: string[] = [];
  for (const line of compose.slice(start + 1)) {
    if (line.trim() !== '' && /^ */.exec(line)![0].length <= indent) break;
    const key = /^\s+([A-Z][A-Z0-9_]+):/.exec(line);
    if (key) keys.push(key[1]);
  }
  return keys;
}

describe('docker-compose.yml passes the configuration through', () => {
  const compose = read('docker-compose.yml').split('\n');
  const shared = blockKeys(compose, /^x-loom-env:/);
  const orchestrator = blockKeys(compose, /^ {2}orchestrator:/);
  // docs/configuration.md, "With Docker Compose": what Compose sets itself or leaves out.
  const composeOwn = [
    'REDIS_URL',
    'MYSQL_URL',
    'PORT',
    'LOOM_PROFILE',
    'LOOM_DATA_DIR',
    'AGENT_PORT',
    'REDIS_CLUSTER_NODES',
    'REDIS_CLUSTER_NAT_MAP',
  ];

  it.each(documentedVariables().filter((name) => !composeOwn.includes(name)))(
    '%s reaches the apps from .env or the environment',
    (name) => {
      expect([...shared, ...orchestrator]).toContain(name);
      const line = compose.find((l) => new RegExp(`^\\s+${name}:`).test(l))!;
      expect(line).toContain(`\${${name}:-`);
    },
  );
});
