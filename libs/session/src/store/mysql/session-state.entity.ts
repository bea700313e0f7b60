import { Column, Entity, Index, PrimaryColumn } from 'typeorm';

/**
 * Seed 003's item table: one row per single value (item_index 0) or per list item (1, 2, …),
 * plus the columns tenancy and expiry need. Created by a migration, never by synchronize.
 */
@Entity({ name: 'loom_session_state' })
@Index('idx_listing', ['tenantId', 'userId', 'stateKey', 'updatedAt'])
@Index('idx_expiry', ['expiresAt'])
export class SessionStateEntity {
  @PrimaryColumn({ name: 'session_id', type: 'varchar', length: 128, collation: 'utf8mb4_bin' })
  sessionId!: string;

  @PrimaryColumn({ name: 'state_key', type: 'varchar', length: 160, collation: 'utf8mb4_bin' })
  stateKey!: string;

  @PrimaryColumn({ name: 'item_index', type: 'int', default: 0 })
  itemIndex!: number;

  @Column({ name: 'tenant_id', type: 'varchar', length: 128, collation: 'utf8mb4_bin' })
  tenantId!: string;

  @Column({
    name: 'user_id',
    type: 'varchar',
    length: 128,
    nullable: true,
    collation: 'utf8mb4_bin',
  })
  userId!: string | null;

  @Column({ name: 'state_data', type: 'longtext' })
  stateData!: string;

  @Column({ name: 'created_at', type: 'timestamp', precision: 3 })
  createdAt!: Date;

  @Column({ name: 'updated_at', type: 'timestamp', precision: 3 })
  updatedAt!: Date;

  @Column({ name: 'expires_at', type: 'timestamp', precision: 3, nullable: true })
  expiresAt!: Date | null;
}
