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

  it.each(['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf'])(
    'treats a key or task type named %s as any other name',
    (name) => {
      expect(acl.check('research', name, 'a', null)).toEqual({
        overwrites: null,
        protected: false,
      });
      expect(acl.check(name, 'free', 'a', null)).toEqual({ overwrites: null, protected: false });
      expect(() => acl.check(name, 'final_decision', 'a', null)).toThrow('may not write');
    },
  );

  it('keeps rules for keys and task types named like Object members', () => {
    const rules = parseSharedAclRules(
      '{"__proto__": {"constructor": ["a-b"]}, "*": {"toString": ["c-d"]}}',
    );
    const named = new SharedContextAcl(rules);
    expect(named.check('__proto__', 'constructor', 'a-b', null).protected).toBe(true);
    expect(() => named.check('__proto__', 'constructor', 'c-d', null)).toThrow('may not write');
    expect(() => named.check('other', 'toString', 'a-b', null)).toThrow('may not write');
    expect(named.check('other', 'constructor', 'c-d', null).protected).toBe(false);
  });
});
