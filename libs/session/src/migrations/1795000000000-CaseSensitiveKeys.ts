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
    // Rows another case of the tenant wrote into a session before now belong to that tenant
    // from here on; the owner may then be refused writes to its own session. Say so.
    const [{ n }] = await queryRunner.query(
      'SELECT COUNT(*) AS n FROM (SELECT session_id FROM loom_session_state ' +
        'GROUP BY session_id HAVING COUNT(DISTINCT tenant_id) > 1) AS mixed',
    );
    if (Number(n) > 0)
      process.stderr.write(
        `loom migration CaseSensitiveKeys: ${n} session(s) hold rows of tenants that differ only ` +
          'in case; list them with: SELECT session_id, tenant_id, MIN(created_at) FROM ' +
          'loom_session_state GROUP BY session_id, tenant_id HAVING session_id IN (SELECT ' +
          'session_id FROM loom_session_state GROUP BY session_id HAVING COUNT(DISTINCT ' +
          'tenant_id) > 1); the tenant that wrote first owns each\n',
      );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE loom_session_state ${KEY_COLUMNS('utf8mb4_unicode_ci')}`);
  }
}
