export * from './infra';
export * from './private-redis';
export * from './agent-harness';
export * from './private-mariadb';
export * from './session-infra';
export * from './tcp-proxy';
export * from './fake-openai-server';
export * from './test-certificates';
