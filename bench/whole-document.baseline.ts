/**
 * The naive baseline: seed 000's saveConversationSession, which serializes the whole
 * conversation (every message) and rewrites it on each change — here to MySQL as one row upsert
 * and to Redis as one SET with the conversation TTL.
 */
import type { RedisClient } from '@loom/session';
import type { DataSource } from 'typeorm';

const CONVERSATION_TTL_SECONDS = 7 * 86400;

export interface WholeDocument {
  /** Writes the document as it is. */
  save(): Promise<void>;
  /** Adds one message and rewrites the whole document. */
  append(): Promise<void>;
  /** Size of the last document written. */
  bytes(): number;
}

export function openWholeDocument(dataSource: DataSource, redis: RedisClient, keyPrefix: string) {
  return {
    start(conversationId: string, length: number, message: (n: number) => unknown): WholeDocument {
      const session = {
        conversationId,
        userId: 'bench-user',
        status: 'ACTIVE',
        messages: Array.from({ length }, (_, i) => message(i + 1)),
      };
      let json = '';
      const save = async () => {
        json = JSON.stringify(session);
        await dataSource.query(
          'INSERT INTO loom_session_state (session_id, state_key, item_index, tenant_id, state_data) ' +
            "VALUES (?, 'conversation', 0, 'bench', ?) ON DUPLICATE KEY UPDATE state_data = VALUES(state_data)",
          [conversationId, json],
        );
        await redis.set(
          `${keyPrefix}naive:conv:${conversationId}`,
          json,
          'EX',
          CONVERSATION_TTL_SECONDS,
        );
      };
      return {
        save,
        append: async () => {
          session.messages.push(message(session.messages.length + 1));
          await save();
        },
        bytes: () => Buffer.byteLength(json),
      };
    },
  };
}
