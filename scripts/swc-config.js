// One SWC configuration for the build and for Jest: transpile only, decorators with metadata
// (Nest's dependency injection reads design:paramtypes), path aliases resolved from tsconfig.
const path = require('path');
const { compilerOptions } = require('../tsconfig.json');

const root = path.resolve(__dirname, '..');

function swcOptions({ resolvePaths }) {
  return {
    sourceMaps: true,
    module: { type: 'commonjs' },
    jsc: {
      target: 'es2022',
      parser: { syntax: 'typescript', decorators: true, dynamicImport: true },
      transform: { legacyDecorator: true, decoratorMetadata: true },
      keepClassNames: true,
      ...(resolvePaths ? { baseUrl: root, paths: compilerOptions.paths } : {}),
    },
  };
}

module.exports = { root, swcOptions };
