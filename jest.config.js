// Tests in four tiers, transpiled file by file by ts-jest (tsconfig isolatedModules: no type-checking here;
// `npm run typecheck` does that once):
//  unit         *.spec.ts next to the code: pure logic, no I/O; and test/*.spec.ts (the docs' links)
//  integration  *.int-spec.ts next to the code: real MySQL and Redis (or HTTP), own database and key prefix per suite
//  e2e          apps/<app>/test/*.e2e-spec.ts: one app in-process against real MySQL and Redis
//  system       test/*.e2e-spec.ts: every app as a real process (needs `npm run build`)
const { compilerOptions } = require('./tsconfig.json');

const moduleNameMapper = Object.fromEntries(
  Object.entries(compilerOptions.paths).map(([alias, [target]]) => [
    `^${alias.replace('/*', '/(.*)')}$`,
    `<rootDir>/${target.replace('/*', '/$1')}`,
  ]),
);
const base = {
  rootDir: __dirname,
  testEnvironment: 'node',
  moduleFileExtensions: ['ts', 'js', 'json'],
  transform: { '^.+\\.ts$': ['ts-jest', { diagnostics: false }] },
  moduleNameMapper,
  testPathIgnorePatterns: ['/node_modules/', '/dist/'],
};

module.exports = {
  testTimeout: 120000,
  projects: [
    {
      ...base,
      displayName: 'unit',
      testMatch: ['<rootDir>/{apps,libs}/**/*.spec.ts', '<rootDir>/test/**/*.spec.ts'],
    },
    { ...base, displayName: 'integration', testMatch: ['<rootDir>/libs/**/*.int-spec.ts'] },
    { ...base, displayName: 'e2e', testMatch: ['<rootDir>/apps/*/test/**/*.e2e-spec.ts'] },
    { ...base, displayName: 'system', testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'] },
  ],
};
