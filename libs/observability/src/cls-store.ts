import { ClsStore } from 'nestjs-cls';

/** The MDC of seed 000: the fields every log line carries where known. */
export interface LoomClsStore extends ClsStore {
  /**
   * The service whose work this context is, when the process hosts more than one (the embedded
   * profile): each log line names it instead of the process's own. Not an MDC field: it is not
   * sent along with a dispatch.
   */
  service?: string;
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
