// @ts-check
import eslint from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.loom-data/**'] },
  eslint.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node, ...globals.jest } },
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-require-imports': 'off',
      'no-restricted-properties': [
        'error',
        { object: 'process', property: 'env', message: 'Read configuration through the typed config of the app.' },
      ],
    },
  },
  {
    files: ['**/config/**/*.ts', 'scripts/**', 'test/**', 'bench/**', '**/*.spec.ts', '**/*.e2e-spec.ts', 'libs/testing/**', 'libs/session/src/cli/**'],
    rules: { 'no-restricted-properties': 'off' },
  },
);
