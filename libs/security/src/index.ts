export * from './assignment/assignment-signer';
export * from './pii';
export * from './input/json-depth';
export * from './throttle/redis-throttler.storage';
