#!/usr/bin/env node
// Transpiles apps/, libs/ and bench/ to dist/ (type-checking is `npm run typecheck`, done once),
// then writes dist/apps/<app>/main.js, the entry point API.md promises for every app.
const fs = require('fs');
const path = require('path');
const { root, transpile } = require('./transpile');

const SKIP = /(\.spec|\.int-spec|\.e2e-spec|\.contract|\.d)\.ts$/;
const ROOTS = ['apps', 'libs', 'bench'];
const outDir = path.join(root, 'dist');

function sources(dir) {
  const out = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'test' && entry.name !== 'node_modules') out.push(...sources(full));
    } else if (entry.name.endsWith('.ts') && !SKIP.test(entry.name)) out.push(full);
  }
  return out;
}

function apps() {
  return fs
    .readdirSync(path.join(root, 'apps'), { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(root, 'apps', d.name, 'src', 'main.ts')))
    .map((d) => d.name);
}

/**
 * Removes what a deleted source left in dist/: an app removed from apps/ would otherwise still
 * run in the embedded profile (it loads every dist/apps/<name>/src/agent.js).
 */
function prune(dir, built) {
  if (!fs.existsSync(dir)) return;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      prune(full, built);
      if (fs.readdirSync(full).length === 0) fs.rmdirSync(full);
    } else if (!built.has(full.replace(/\.map$/, ''))) fs.rmSync(full);
  }
}

function main() {
  const started = Date.now();
  const files = ROOTS.filter((dir) => fs.existsSync(path.join(root, dir))).flatMap((dir) =>
    sources(path.join(root, dir)),
  );
  const targets = new Set(
    files.map((f) => path.join(outDir, path.relative(root, f).replace(/\.ts$/, '.js'))),
  );
  for (const app of apps()) targets.add(path.join(outDir, 'apps', app, 'main.js'));
  for (const dir of ROOTS) prune(path.join(outDir, dir), targets);
  for (const file of files) {
    const target = path.join(outDir, path.relative(root, file).replace(/\.ts$/, '.js'));
    const { code, map } = transpile(fs.readFileSync(file, 'utf8'), file);
    fs.mkdirSync(path.dirname(target), { recursive: true });
    fs.writeFileSync(target, `${code}\n//# sourceMappingURL=${path.basename(target)}.map\n`);
    fs.writeFileSync(`${target}.map`, map);
  }
  for (const app of apps()) {
    fs.writeFileSync(path.join(outDir, 'apps', app, 'main.js'), "require('./src/main.js');\n");
  }
  console.log(`built ${files.length} files, apps: ${apps().join(', ')} (${Date.now() - started} ms)`);
}

main();
