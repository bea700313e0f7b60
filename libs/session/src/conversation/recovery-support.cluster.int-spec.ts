import { PrivateRedisCluster } from '@loom/testing';
import { runRecoverySupportSuite } from './recovery-support.suite';

runRecoverySupportSuite({
  name: 'cluster',
  open: async () => {
    const cluster = await PrivateRedisCluster.start();
    return {
      target: { url: cluster.url, clusterNodes: cluster.seeds },
      close: () => cluster.stop(),
    };
  },
});
