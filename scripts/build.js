#!/usr/bin/env node
// Transpiles apps/, libs/ and bench/ to dist/ with SWC (type-checking is `npm run typecheck`, done once),
// then writes dist/apps/<app>/main.js, the entry point API.md promises for every app.
const fs = require('fs');
const path = require('path');
const swc = require('@swc/core');
const { root, swcOptions } = require('./swc-config');

const SKIP = /(\.spec|\.e2e-spec|\.d)\.ts$/;
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

async function main() {
  const started = Date.now();
  const files = ROOTS.filter((dir) => fs.existsSync(path.join(root, dir))).flatMap((dir) =>
    sources(path.join(root, dir)),
  );
  const options = swcOptions({ resolvePaths: true });
  await Promise.all(
    files.map(async (file) => {
      const rel = path.relative(root, file);
      const target = path.join(outDir, rel.replace(/\.ts$/, '.js'));
      const { code, map } = await swc.transformFile(file, {
        ...options,
        filename: file,
        sourceFileName: path.relative(path.dirname(target), file),
      });
      fs.mkdirSync(path.dirname(target), { recursive: true });
      fs.writeFileSync(target, `${code}\n//# sourceMappingURL=${path.basename(target)}.map\n`);
      fs.writeFileSync(`${target}.map`, map);
    }),
  );
  for (const app of apps()) {
    fs.writeFileSync(path.join(outDir, 'apps', app, 'main.js'), "require('./src/main.js');\n");
  }
  console.log(`built ${files.length} files, apps: ${apps().join(', ')} (${Date.now() - started} ms)`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
