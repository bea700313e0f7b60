import { TEST_REDIS_URL } from '@loom/testing';
import { runRecoverySupportSuite } from './recovery-support.suite';

runRecoverySupportSuite({
  name: 'standalone',
  open: async () => ({ target: { url: TEST_REDIS_URL }, close: async () => undefined }),
});
