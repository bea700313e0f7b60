import { Inject, Injectable } from '@nestjs/common';
import { LLM_CLIENT, LlmError, type LlmClient, type LlmUsage } from '../llm/llm.types';
import { truncate } from '../llm/text';
import { buildPlanPrompt, planFromModelAnswer } from './model-plan';
import type { Plan, PlanInput } from './planner.types';
import { planByRules } from './rule-planner';

const PLAN_MAX_TOKENS = 200;

/**
 * Decides which registered agents work on a turn. Works only from the descriptors it is given,
 * so a newly registered agent app is routed without changing the planner.
 */
@Injectable()
export class Planner {
  constructor(@Inject(LLM_CLIENT) private readonly llm: LlmClient) {}

  /** Keyword rules offline; with a real model its JSON answer, validated, else the rules. */
  async plan(input: PlanInput): Promise<Plan> {
    if (this.llm.provider === 'offline') return planByRules(input);
    let rejection: string;
    let usage: LlmUsage | undefined;
    try {
      const answer = await this.llm.complete({
        purpose: 'plan',
        messages: buildPlanPrompt(input),
        maxTokens: PLAN_MAX_TOKENS,
        temperature: 0,
      });
      usage = answer.usage;
      const plan = planFromModelAnswer(answer.text, input);
      if (typeof plan !== 'string') return { ...plan, usage };
      rejection = plan;
    } catch (error) {
      rejection = error instanceof Error ? error.message : 'model call failed';
      // An answer the client refused (cut off, say) was paid for all the same.
      if (error instanceof LlmError) usage = error.usage;
    }
    const plan = planByRules(input, `model answer rejected (${truncate(rejection, 120)}); `);
    return usage ? { ...plan, usage } : plan;
  }
}
