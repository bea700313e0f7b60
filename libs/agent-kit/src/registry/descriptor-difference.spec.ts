import { AgentRegistration } from '../contracts/agent-descriptor';
import { descriptorDifference } from './descriptor-difference';

const own: AgentRegistration = {
  agentType: 'tax-law',
  description: 'Income tax questions',
  role: 'specialist',
  intents: ['tax-law'],
  keywords: ['tax', 'vat'],
  endpoint: { host: '127.0.0.1', port: 4001 },
};

describe('descriptorDifference', () => {
  it('names what planning reads differently, not the endpoint', () => {
    expect(descriptorDifference(own, { ...own, endpoint: { host: '127.0.0.1', port: 4002 } })).toBe(
      null,
    );
    expect(
      descriptorDifference(own, {
        ...own,
        description: 'Income and property tax questions',
        keywords: ['tax', 'property'],
      }),
    ).toBe('description; keywords +property -vat');
    expect(descriptorDifference(own, { ...own, role: 'research', keywords: ['vat', 'tax'] })).toBe(
      'role research; keywords order',
    );
  });

  it('names five words at most, then how many more', () => {
    const keywords = Array.from({ length: 8 }, (_, i) => `k${i}`);
    expect(descriptorDifference(own, { ...own, keywords: ['tax', 'vat', ...keywords] })).toBe(
      'keywords +k0 +k1 +k2 +k3 +k4 (3 more)',
    );
  });
});
