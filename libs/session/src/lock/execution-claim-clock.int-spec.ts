import { PrivateRedisServer, sleep } from '@loom/testing';
import { RedisClient, openRedis } from '../redis/redis-client';
import { RedisKeys } from '../store/redis/redis-keys';
import { LoomErrorCode } from '../errors/session-error';
import { newId } from '../ids';
import { ExecutionClaims } from './execution-claim';

const JUMP_MS = 10 * 60_000;

/**
 * `confirm()` waits out a Redis blip for a few seconds before it fails closed. That window is a
 * duration on the claim's clock (the deployment's SharedClock in an agent), not on the host's
 * wall clock: a wall clock stepped by NTP or a VM resume while Redis blips must neither reject a
 * claim that is still ours (stepped forward) nor keep a write waiting for as long as the step
 * (stepped back). A private redis-server, killed and restarted; Date.now() stepped.
 */
describe('execution claim: confirm() across a wall-clock step', () => {
  let server: PrivateRedisServer;
  let redis: RedisClient;
  const realNow = Date.now;
  // The claim's clock: steady, whatever Date.now() says.
  const clock = { now: () => realNow() };

  beforeAll(async () => {
    server = await PrivateRedisServer.start();
    redis = openRedis(
      { url: server.url },
      // Fails at once while the server is down, and reconnects quickly once it is back.
      { enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 20 },
    );
    redis.on('error', () => undefined);
  });
  afterEach(() => jest.restoreAllMocks());
  afterAll(async () => {
    redis?.disconnect();
    await server?.kill();
  });

  const claims = () =>
    new ExecutionClaims(redis, new RedisKeys('claimclock:'), { ttlMs: 2000, pollMs: 20 }, clock);

  it('a wall clock stepped forward during a Redis blip does not reject a claim still ours', async () => {
    const claim = await claims().acquire(newId('c'), newId('a'), realNow() + 60_000);
    await server.kill();
    const confirming = claim.confirm();
    jest.spyOn(Date, 'now').mockImplementation(() => realNow() + JUMP_MS);
    await sleep(300);
    await server.restart();
    await expect(confirming).resolves.toBeUndefined();
    await claim.release();
  });

  it('a wall clock stepped back during a Redis outage does not hold a write past the window', async () => {
    const claim = await claims().acquire(newId('c'), newId('a'), realNow() + 60_000);
    await server.kill();
    try {
      const confirming = claim.confirm();
      jest.spyOn(Date, 'now').mockImplementation(() => realNow() - JUMP_MS);
      await expect(confirming).rejects.toMatchObject({ code: LoomErrorCode.UNAVAILABLE });
    } finally {
      jest.restoreAllMocks();
      await server.restart();
      await claim.release();
    }
  }, 20_000);
});
