export { RedisStreamsClient } from './redis-streams.client';
export { RedisStreamsContext } from './redis-streams.context';
export {
  CONSUMER_GROUP,
  HandlerCancelled,
  REDIS_STREAMS_TRANSPORT,
  deadLetterStreamKey,
  replyStreamKey,
  requestStreamKey,
} from './redis-streams.options';
export type {
  RedisStreamsClientOptions,
  RedisStreamsError,
  RedisStreamsOptions,
} from './redis-streams.options';
export { requestQueueDepth } from './redis-streams.depth';
export type { RequestQueueDepth } from './redis-streams.depth';
export { retireRequestStream } from './redis-streams.retire';
export type { RetiredStream } from './redis-streams.retire';
export { RedisStreamsServer } from './redis-streams.server';
export type { RedisStreamsEvents } from './redis-streams.util';
