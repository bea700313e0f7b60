import { MemoryAgentRegistry } from './agent-registry';
import { registryContract } from './agent-registry.contract';

/** The embedded profile's registry keeps the same descriptor as the Redis one. */
describe('MemoryAgentRegistry', () => {
  let n = 0;
  registryContract(
    (staleMs) => new MemoryAgentRegistry(staleMs),
    () => `memory-tax-${++n}`,
  );
});
