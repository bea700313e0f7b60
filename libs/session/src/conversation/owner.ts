/** Who a request acts for: the tenant and user from the verified token (or a signed assignment). */
export interface Owner {
  tenantId: string;
  userId: string;
}
