// One TypeScript transpile for the build: per file, no type-checking (`npm run typecheck` does
// that once), decorator metadata kept (Nest's DI reads design:paramtypes), and the @loom/* path
// aliases rewritten to relative requires. Pure JavaScript: no platform binary to install.
const path = require('path');
const ts = require('typescript');
const tsconfig = require('../tsconfig.json');

const root = path.resolve(__dirname, '..');

const compilerOptions = {
  ...ts.convertCompilerOptionsFromJson(tsconfig.compilerOptions, root).options,
  incremental: false,
  tsBuildInfoFile: undefined,
  declaration: false,
  noEmit: false,
  sourceMap: true,
  inlineSources: false,
  isolatedModules: true,
};

// '@loom/session' → '<root>/libs/session/src', '@loom/session/x' → '<root>/libs/session/src/x'
const aliases = Object.entries(tsconfig.compilerOptions.paths).map(([alias, [target]]) => ({
  prefix: alias.replace('/*', ''),
  wildcard: alias.endsWith('/*'),
  target: path.join(root, target.replace('/*', '')),
}));

function resolveAlias(specifier, fromFile) {
  for (const a of aliases) {
    const exact = specifier === a.prefix && !a.wildcard;
    const nested = a.wildcard && specifier.startsWith(`${a.prefix}/`);
    if (!exact && !nested) continue;
    const target = exact ? a.target : path.join(a.target, specifier.slice(a.prefix.length + 1));
    let rel = path.relative(path.dirname(fromFile), target).split(path.sep).join('/');
    if (!rel.startsWith('.')) rel = `./${rel}`;
    return rel;
  }
  return null;
}

/** Transpiles `source` of `fileName` (a path under the repo) to CommonJS with a source map. */
function transpile(source, fileName) {
  const out = ts.transpileModule(source, { compilerOptions, fileName, reportDiagnostics: false });
  const code = out.outputText.replace(/require\("(@loom\/[^"]+)"\)/g, (whole, spec) => {
    const rel = resolveAlias(spec, fileName);
    return rel ? `require(${JSON.stringify(rel)})` : whole;
  });
  return { code: code.replace(/\n\/\/# sourceMappingURL=.*$/, ''), map: out.sourceMapText };
}

module.exports = { root, transpile };
