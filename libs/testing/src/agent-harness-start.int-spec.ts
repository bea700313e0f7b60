import { Injectable } from '@nestjs/common';
import { createConnection } from 'mysql2/promise';
import { AgentHandler } from '@loom/agent-kit';
import { emptyUsage } from '@loom/session';
import { AgentHarness } from './agent-harness';
import { TEST_MYSQL_URL } from './infra';

@Injectable()
class DoneHandler implements AgentHandler {
  handle() {
    return Promise.resolve({ answer: 'done', usage: emptyUsage(), sharedKeysWritten: [] });
  }
}

/**
 * AgentHarness runs its agent on the MariaDB every suite, helper and CI run shares. A start that
 * fails (a setting refused, a store out of reach) leaves the suite no harness to stop: the
 * database made for it (`loom_agent_<pid>_…`, named after this process) must go with it.
 */
describe('an AgentHarness that fails to start', () => {
  it('leaves no database behind', async () => {
    await expect(
      AgentHarness.start(
        {
          agentType: 'harness-fail',
          description: 'test agent: never starts',
          role: 'specialist',
          intents: ['harness-fail'],
          keywords: [],
        },
        DoneHandler,
        { PORT: 'not-a-port' },
      ),
    ).rejects.toThrow(/PORT/);
    const conn = await createConnection(TEST_MYSQL_URL);
    try {
      const [rows] = await conn.query(`SHOW DATABASES LIKE 'loom\\_agent\\_${process.pid}\\_%'`);
      expect(rows).toEqual([]);
    } finally {
      await conn.end();
    }
  });
});
