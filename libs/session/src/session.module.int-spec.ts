import { Test } from '@nestjs/testing';
import { createTestDatabase, createTestPrefix } from '@loom/testing';
import { DEFAULT_SESSION_OPTIONS, SESSION_OPTIONS, SessionOptions } from './config/session-options';
import { ConversationRepository } from './conversation/conversation.repository';
import { SessionModule } from './session.module';

describe('SessionModule.forRootAsync (real MySQL and Redis)', () => {
  it('takes only the options that differ from the defaults, as createSessionInfra does', async () => {
    const [db, prefix] = [await createTestDatabase('loom_module'), createTestPrefix('loommodule')];
    const app = await Test.createTestingModule({
      imports: [
        SessionModule.forRootAsync({
          useFactory: async () => ({ mysqlUrl: db.url, keyPrefix: prefix.prefix }),
        }),
      ],
    }).compile();
    await app.init();
    try {
      const options = app.get<SessionOptions>(SESSION_OPTIONS);
      expect(options).toEqual({
        ...DEFAULT_SESSION_OPTIONS,
        mysqlUrl: db.url,
        keyPrefix: prefix.prefix,
      });
      const conversations = app.get(ConversationRepository);
      const owner = { tenantId: 't1', userId: 'u1' };
      const { meta } = await conversations.create(owner);
      expect((await conversations.get(owner, meta.conversationId)).expiresAt).toBeDefined();
    } finally {
      await app.close();
      await Promise.all([db.drop(), prefix.cleanup()]);
    }
  });
});
