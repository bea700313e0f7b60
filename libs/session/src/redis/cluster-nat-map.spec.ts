import { parseClusterNatMap } from './cluster-nat-map';

describe('parseClusterNatMap', () => {
  it('maps each announced host:port to where it is reached, keyed as ioredis looks it up', () => {
    expect(
      parseClusterNatMap(
        '10.0.1.5:6379=redis.example.com:30001,10.0.1.6:6379=redis.example.com:30002',
      ),
    ).toEqual({
      '10.0.1.5:6379': { host: 'redis.example.com', port: 30001 },
      '10.0.1.6:6379': { host: 'redis.example.com', port: 30002 },
    });
  });

  it('takes bracketed IPv6 hosts on either side, the announced one keyed bare as Redis writes it', () => {
    expect(
      parseClusterNatMap('[fd00::5]:6379=[2001:db8::1]:30001,10.0.1.6:6379=[::1]:7000'),
    ).toEqual({
      'fd00::5:6379': { host: '2001:db8::1', port: 30001 },
      '10.0.1.6:6379': { host: '::1', port: 7000 },
    });
  });

  it('ignores whitespace around pairs and sides, and empty entries', () => {
    expect(parseClusterNatMap(' 10.0.1.5:6379 = lb:30001 ,, 10.0.1.6:6379=lb:30002 ,')).toEqual({
      '10.0.1.5:6379': { host: 'lb', port: 30001 },
      '10.0.1.6:6379': { host: 'lb', port: 30002 },
    });
    expect(parseClusterNatMap(undefined)).toEqual({});
    expect(parseClusterNatMap(' , ')).toEqual({});
  });

  it('refuses a malformed pair, naming it', () => {
    for (const bad of [
      '10.0.1.5:6379', // no reachable side
      '10.0.1.5:6379=', // empty reachable side
      '=lb:30001',
      '10.0.1.5:6379=lb:30001=lb:30002',
      '10.0.1.5=lb:30001', // no port
      '10.0.1.5:6379=lb:0',
      '10.0.1.5:6379=lb:65536',
      '10.0.1.5:6379=redis://lb:30001',
      '::1:6379=lb:30001', // IPv6 without brackets
      '10.0.1.5:6379 lb:30001',
    ])
      expect(() => parseClusterNatMap(`10.0.1.9:6379=lb:30009,${bad}`)).toThrow(
        new Error(`"${bad}" is not announced=reachable with each side host:port`),
      );
  });

  it('refuses an announced address mapped twice, however it is written', () => {
    expect(() => parseClusterNatMap('10.0.1.5:6379=lb:30001,10.0.1.5:6379=lb:30002')).toThrow(
      new Error('"10.0.1.5:6379=lb:30002" maps 10.0.1.5:6379 a second time'),
    );
    expect(() => parseClusterNatMap('[::1]:6379=lb:30001, [::1]:06379 = lb:30001')).toThrow(
      new Error('"[::1]:06379 = lb:30001" maps ::1:6379 a second time'),
    );
    // One reachable address behind two announced ones is a choice (one load balancer), not an error.
    expect(Object.keys(parseClusterNatMap('a:1=lb:30001,b:1=lb:30001'))).toEqual(['a:1', 'b:1']);
  });
});
