import { LoomError } from '../errors/session-error';
import { parseSharedAclRules, SharedContextAcl } from './shared-acl';

describe('parseSharedAclRules', () => {
  it('accepts task types mapping keys to writer lists, as JSON or object', () => {
    const rules = {
      '*': { final_decision: ['decision-agent'] },
      'follow-up': { 'research.statutes': ['labor-law'] },
    };
    expect(parseSharedAclRules(JSON.stringify(rules))).toEqual(rules);
    expect(parseSharedAclRules({})).toEqual({});
  });

  it.each([
    ['[]', 'JSON object'],
    ['{"x": []}', 'map keys'],
    ['{"x": {"k": []}}', 'list agent types'],
    ['{"x": {"k": ["Bad Agent"]}}', 'list agent types'],
    ['{"x": {"../k": ["a-b"]}}', 'bad key'],
    ['{"x y": {}}', 'bad task type'],
  ])('rejects %s', (json, why) => {
    expect(() => parseSharedAclRules(json)).toThrow(why);
  });
});

describe('SharedContextAcl.check', () => {
  const acl = new SharedContextAcl({
    '*': { final_decision: ['decision'] },
    research: { r: ['a', 'b'] },
  });

  it('enforces declared writers per task type, `*` as the fallback, and closes protected.* by default', () => {
    expect(acl.check('research', 'r', 'a', null)).toEqual({ overwrites: null, protected: true });
    expect(() => acl.check('research', 'r', 'c', null)).toThrow(LoomError);
    expect(() => acl.check('other', 'final_decision', 'a', null)).toThrow('may not write');
    expect(acl.check('other', 'final_decision', 'decision', 'a')).toEqual({
      overwrites: 'a',
      protected: true,
    });
    expect(() => acl.check('other', 'protected.x', 'decision', null)).toThrow('may not write');
    expect(acl.check('other', 'free', 'a', 'a')).toEqual({ overwrites: null, protected: false });
  });
});
