import { PrivateRedisCluster } from '@loom/testing';
import { runTransportSuite } from './redis-streams.suite';

let cluster: PrivateRedisCluster;
runTransportSuite({
  name: 'cluster',
  restartMasterOf: (key) => cluster.restartMasterOf(key),
  masterPortOf: (key) => cluster.portOf(key),
  open: async () => {
    cluster = await PrivateRedisCluster.start();
    const redis = await cluster.client();
    return {
      target: { url: cluster.url, clusterNodes: cluster.seeds },
      redis,
      close: async () => {
        redis.disconnect();
        await cluster.stop();
      },
    };
  },
});
