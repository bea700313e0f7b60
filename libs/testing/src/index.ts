export * from './infra';
export * from './private-redis';
