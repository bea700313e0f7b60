import { ClsStore } from 'nestjs-cls';

/** The MDC of seed 000: the fields every log line carries where known. */
export interface LoomClsStore extends ClsStore {
  correlationId?: string;
  tenantId?: string;
  userId?: string;
  conversationId?: string;
  taskId?: string;
  agentId?: string;
  agentType?: string;
}

export const MDC_FIELDS = [
  'correlationId',
  'tenantId',
  'conversationId',
  'taskId',
  'agentId',
  'agentType',
] as const;
export type MdcField = (typeof MDC_FIELDS)[number];
