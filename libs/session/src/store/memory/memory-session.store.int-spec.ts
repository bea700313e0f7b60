import { runFenceLapseTests, runSessionStoreContract } from '../session-store.contract';
import { MemorySessionStore } from './memory-session.store';

runSessionStoreContract('memory', async () => {
  const store = new MemorySessionStore();
  return { store, cleanup: () => store.close() };
});

runFenceLapseTests('memory', async (now) => {
  const store = new MemorySessionStore({ now });
  return { store, cleanup: () => store.close() };
});
