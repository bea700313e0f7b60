import { Inject, Injectable, Module } from '@nestjs/common';
import { AgentHarness } from '@loom/testing';
import { emptyUsage, SessionContext } from '@loom/session';
import { AgentDefinition, AgentHandler } from './agent-handler';

@Injectable()
class TaxRates {
  rateFor(year: number): string {
    return year >= 2024 ? '20%' : '25%';
  }
}

const CURRENCY = Symbol('CURRENCY');

@Module({ providers: [{ provide: CURRENCY, useValue: 'CNY' }], exports: [CURRENCY] })
class CurrencyModule {}

/** A handler with dependencies of its own: one from `providers`, one from an imported module. */
@Injectable()
class TaxHandler implements AgentHandler {
  constructor(
    private readonly rates: TaxRates,
    @Inject(CURRENCY) private readonly currency: string,
  ) {}

  async handle(ctx: SessionContext) {
    return {
      answer: `${ctx.question}: ${this.rates.rateFor(2025)} (${this.currency})`,
      usage: emptyUsage(),
    };
  }
}

const TAX_AGENT: AgentDefinition = {
  descriptor: {
    agentType: 'tax-rates',
    description: 'test agent: answers from an injected provider',
    role: 'specialist',
    intents: ['tax-rates'],
    keywords: [],
  },
  handler: TaxHandler,
  imports: [CurrencyModule],
  providers: [TaxRates],
};

describe('an agent definition with imports and providers (real Redis Streams, MySQL, Redis)', () => {
  let agent: AgentHarness;
  const owner = { tenantId: 'tenant-a', userId: 'alice' };

  beforeAll(async () => {
    agent = await AgentHarness.start(TAX_AGENT);
  });
  afterAll(() => agent?.stop());

  it('injects them into the handler', async () => {
    const task = await agent.seed(owner, [], 'income tax rate');
    const result = await agent.execute(agent.request(owner, task));
    expect(result.output).toBe('income tax rate: 20% (CNY)');
  });
});
