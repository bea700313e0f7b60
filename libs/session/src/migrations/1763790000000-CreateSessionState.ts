import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The durable table of DESIGN.md §4 (seed 003's columns and key, utf8mb4). IF NOT EXISTS: MySQL
 * commits a CREATE TABLE by itself, so a start stopped before the migration's row was written
 * left the table, and every later start failed on it.
 */
export class CreateSessionState1763790000000 implements MigrationInterface {
  name = 'CreateSessionState1763790000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE IF NOT EXISTS loom_session_state (
        session_id  VARCHAR(128) NOT NULL,
        state_key   VARCHAR(160) NOT NULL,
        item_index  INT NOT NULL DEFAULT 0,
        tenant_id   VARCHAR(128) NOT NULL,
        user_id     VARCHAR(128) NULL,
        state_data  LONGTEXT NOT NULL,
        created_at  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
        updated_at  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
        expires_at  TIMESTAMP(3) NULL,
        PRIMARY KEY (session_id, state_key, item_index),
        KEY idx_listing (tenant_id, user_id, state_key, updated_at),
        KEY idx_expiry (expires_at)
      ) ENGINE=InnoDB DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE loom_session_state');
  }
}
