import { CreateSessionState1763790000000 } from './1763790000000-CreateSessionState';
import { CaseSensitiveKeys1795000000000 } from './1795000000000-CaseSensitiveKeys';

/** Every migration, in order; listed explicitly so a bundled or transpiled build finds them. */
export const SESSION_MIGRATIONS = [CreateSessionState1763790000000, CaseSensitiveKeys1795000000000];
