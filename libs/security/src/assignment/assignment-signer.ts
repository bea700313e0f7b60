import { createHmac, timingSafeEqual } from 'crypto';
import { LoomError, LoomErrorCode } from '@loom/session';

/** What the orchestrator allows one agent execution to touch (DESIGN.md §9). */
export interface AssignmentClaims {
  tenantId: string;
  userId: string;
  conversationId: string;
  taskId: string;
  agentSessionId: string;
  agentType: string;
  /** Epoch ms after which the assignment is void. */
  expiresAt: number;
}

export interface SignedAssignment extends AssignmentClaims {
  signature: string;
}

const FIELDS: Array<keyof AssignmentClaims> = [
  'tenantId',
  'userId',
  'conversationId',
  'taskId',
  'agentSessionId',
  'agentType',
  'expiresAt',
];

/**
 * HMAC-SHA256 over the claims, with a secret the orchestrator and agents share (never the JWT
 * secret). Agents reject unsigned, altered or expired assignments before touching any state.
 */
export class AssignmentSigner {
  /**
   * `clock`: the time expiries are written and checked on. The orchestrator's host writes them and
   * the agent's checks them, so both pass the deployment's SharedClock (Redis TIME); a host's own
   * Date.now() minutes off would refuse valid assignments or take expired ones.
   */
  constructor(
    private readonly secret: string,
    private readonly clock: { now(): number } = { now: () => Date.now() },
  ) {
    if (secret.length < 16) throw new Error('LOOM_AGENT_SECRET must be at least 16 characters');
  }

  /** `ms` from now on the signer's clock: an `expiresAt` (whole ms, as the payload's schema wants). */
  expiresIn(ms: number): number {
    return Math.floor(this.clock.now() + ms);
  }

  sign(claims: AssignmentClaims): SignedAssignment {
    return { ...claims, signature: this.mac(claims) };
  }

  /** The verified claims; ASSIGNMENT_REJECTED when anything is off. */
  verify(input: unknown, expectedAgentType: string, now = this.clock.now()): AssignmentClaims {
    const a = input as Partial<SignedAssignment> | null;
    if (!a || typeof a !== 'object' || typeof a.signature !== 'string')
      throw rejected('unsigned assignment');
    for (const f of FIELDS)
      if (a[f] === undefined || a[f] === null) throw rejected(`assignment lacks ${f}`);
    const claims = Object.fromEntries(FIELDS.map((f) => [f, a[f]])) as unknown as AssignmentClaims;
    const expected = Buffer.from(this.mac(claims), 'hex');
    const given = Buffer.from(a.signature, 'hex');
    if (expected.length !== given.length || !timingSafeEqual(expected, given))
      throw rejected('bad assignment signature');
    if (typeof claims.expiresAt !== 'number' || claims.expiresAt < now)
      throw rejected('assignment expired');
    if (claims.agentType !== expectedAgentType)
      throw rejected('assignment is for another agent type');
    return claims;
  }

  private mac(claims: AssignmentClaims): string {
    const canonical = JSON.stringify(FIELDS.map((f) => claims[f]));
    return createHmac('sha256', this.secret).update(canonical).digest('hex');
  }
}

function rejected(message: string): LoomError {
  return new LoomError(LoomErrorCode.ASSIGNMENT_REJECTED, message);
}
