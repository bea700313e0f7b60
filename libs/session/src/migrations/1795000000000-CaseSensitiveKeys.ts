import { MigrationInterface, QueryRunner } from 'typeorm';

const KEY_COLUMNS = (collation: string) =>
  [
    `MODIFY session_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE ${collation} NOT NULL`,
    `MODIFY state_key VARCHAR(160) CHARACTER SET utf8mb4 COLLATE ${collation} NOT NULL`,
    `MODIFY tenant_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE ${collation} NOT NULL`,
    `MODIFY user_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE ${collation} NULL`,
  ].join(', ');

/**
 * Ids, state keys, tenants and users compare byte for byte, as they do in Redis and in the
 * process: under the table's case-insensitive collation, tenant `ACME` matched tenant `acme`'s
 * rows, so a read that missed Redis could return another tenant's data. No two existing rows
 * can differ only in case (the primary key was case-insensitive), so the change cannot fail on
 * duplicates; going back down can, once such rows exist.
 */
export class CaseSensitiveKeys1795000000000 implements MigrationInterface {
  name = 'CaseSensitiveKeys1795000000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE loom_session_state ${KEY_COLUMNS('utf8mb4_bin')}`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE loom_session_state ${KEY_COLUMNS('utf8mb4_unicode_ci')}`);
  }
}
