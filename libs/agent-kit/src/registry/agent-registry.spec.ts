import { MemoryAgentRegistry } from './agent-registry';
import { registryContract, STALE_MS } from './agent-registry.contract';

/** The embedded profile's registry keeps the same descriptor as the Redis one. */
describe('MemoryAgentRegistry', () => {
  let n = 0;
  registryContract(
    () => new MemoryAgentRegistry(STALE_MS),
    () => `memory-tax-${++n}`,
  );
});
