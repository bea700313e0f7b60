import {
  messagesReadPerTenant,
  messagesReadPerUser,
  turnsPerTenant,
  turnsPerUser,
} from './admission-shares';
import { parseEnv } from './loom-env';

describe("a tenant's and a user's shares of the orchestrator's admission bounds", () => {
  const secrets = { LOOM_JWT_SECRET: 'x'.repeat(32), LOOM_AGENT_SECRET: 'y'.repeat(32) };

  it("gives a user half of its tenant's share by default, at least one turn or one page", () => {
    const env = parseEnv(secrets);
    expect([turnsPerTenant(env), turnsPerUser(env)]).toEqual([100, 50]);
    expect([messagesReadPerTenant(env), messagesReadPerUser(env)]).toEqual([500, 250]);
    const small = parseEnv({ ...secrets, LOOM_MAX_TURNS_IN_FLIGHT: '1' });
    expect([turnsPerTenant(small), turnsPerUser(small)]).toEqual([1, 1]);
    const setTenant = parseEnv({
      ...secrets,
      LOOM_MAX_TURNS_PER_TENANT: '7',
      LOOM_MAX_MESSAGES_READ_PER_TENANT: '300',
    });
    expect([turnsPerUser(setTenant), messagesReadPerUser(setTenant)]).toEqual([4, 200]);
  });

  it("takes a user's share as set, up to its tenant's", () => {
    const env = parseEnv({
      ...secrets,
      LOOM_MAX_TURNS_PER_USER: '100',
      LOOM_MAX_MESSAGES_READ_PER_USER: '500',
    });
    expect([turnsPerUser(env), messagesReadPerUser(env)]).toEqual([100, 500]);
  });

  it("refuses a tenant's share above the process's bound, naming it", () => {
    expect(() => parseEnv({ ...secrets, LOOM_MAX_TURNS_PER_TENANT: '201' })).toThrow(
      /^invalid configuration: LOOM_MAX_TURNS_PER_TENANT: must not exceed LOOM_MAX_TURNS_IN_FLIGHT \(here 200\)$/,
    );
    expect(() =>
      parseEnv({
        ...secrets,
        LOOM_MAX_MESSAGES_READ_IN_FLIGHT: '400',
        LOOM_MAX_MESSAGES_READ_PER_TENANT: '401',
      }),
    ).toThrow(
      /^invalid configuration: LOOM_MAX_MESSAGES_READ_PER_TENANT: must not exceed LOOM_MAX_MESSAGES_READ_IN_FLIGHT \(here 400\)$/,
    );
    // A single tenant's deployment gives it the whole bound.
    const single = parseEnv({
      ...secrets,
      LOOM_MAX_TURNS_PER_TENANT: '200',
      LOOM_MAX_MESSAGES_READ_PER_TENANT: '1000',
    });
    expect([turnsPerTenant(single), messagesReadPerTenant(single)]).toEqual([200, 1000]);
  });

  it("refuses a user's share above its tenant's, or below one turn or one page, naming it", () => {
    expect(() => parseEnv({ ...secrets, LOOM_MAX_TURNS_PER_USER: '101' })).toThrow(
      /^invalid configuration: LOOM_MAX_TURNS_PER_USER: must not exceed the tenant's share \(LOOM_MAX_TURNS_PER_TENANT, here 100\)$/,
    );
    expect(() =>
      parseEnv({ ...secrets, LOOM_MAX_TURNS_PER_TENANT: '3', LOOM_MAX_TURNS_PER_USER: '4' }),
    ).toThrow(/LOOM_MAX_TURNS_PER_USER: must not exceed the tenant's share/);
    expect(() => parseEnv({ ...secrets, LOOM_MAX_MESSAGES_READ_PER_USER: '501' })).toThrow(
      /^invalid configuration: LOOM_MAX_MESSAGES_READ_PER_USER: must not exceed the tenant's share \(LOOM_MAX_MESSAGES_READ_PER_TENANT, here 500\)$/,
    );
    expect(() => parseEnv({ ...secrets, LOOM_MAX_TURNS_PER_USER: '0' })).toThrow(
      /LOOM_MAX_TURNS_PER_USER must not be less than 1/,
    );
    expect(() => parseEnv({ ...secrets, LOOM_MAX_MESSAGES_READ_PER_USER: '199' })).toThrow(
      /LOOM_MAX_MESSAGES_READ_PER_USER must not be less than 200/,
    );
    expect(() => parseEnv({ ...secrets, LOOM_MAX_TURNS_PER_USER: 'many' })).toThrow(
      /LOOM_MAX_TURNS_PER_USER must be an integer number/,
    );
  });
});
