import { EventEmitter } from 'events';
import { Socket } from 'net';
import { addressGroup, ConnectionLimit } from './connection-limit';

/** A socket as the limit sees it: its peer's address, destroy(), and a 'close' it emits. */
function fakeSocket(remoteAddress: string | undefined) {
  const socket = Object.assign(new EventEmitter(), { remoteAddress, destroy: jest.fn() });
  return socket as unknown as Socket & { destroy: jest.Mock };
}

describe('ConnectionLimit', () => {
  it('destroys a connection past the limit of its address, leaving other addresses be', () => {
    const refused = jest.fn();
    const limit = new ConnectionLimit(2, refused);
    const [a, b, c] = ['10.0.0.1', '10.0.0.1', '10.0.0.1'].map(fakeSocket);
    const other = fakeSocket('10.0.0.2');
    for (const socket of [a, b, c, other]) limit.admit(socket);
    expect([a, b, c, other].map((s) => s.destroy.mock.calls.length)).toEqual([0, 0, 1, 0]);
    expect(refused).toHaveBeenCalledTimes(1);
    expect(limit.heldBy('10.0.0.1')).toBe(2);
    expect(limit.heldBy('10.0.0.2')).toBe(1);
  });

  it('gives a place back when a counted connection closes, and none for a refused one', () => {
    const limit = new ConnectionLimit(1);
    const first = fakeSocket('10.0.0.1');
    const refused = fakeSocket('10.0.0.1');
    limit.admit(first);
    limit.admit(refused);
    refused.emit('close');
    expect(limit.heldBy('10.0.0.1')).toBe(1);
    first.emit('close');
    expect(limit.heldBy('10.0.0.1')).toBe(0);
    const next = fakeSocket('10.0.0.1');
    limit.admit(next);
    expect(next.destroy).not.toHaveBeenCalled();
  });

  it('keeps no entry for an address once its last connection has closed', () => {
    const limit = new ConnectionLimit(3);
    const sockets = Array.from({ length: 100 }, (_, i) => fakeSocket(`10.0.${i >> 4}.${i}`));
    for (const socket of sockets) limit.admit(socket);
    expect(limit.addresses).toBe(100);
    for (const socket of sockets) socket.emit('close');
    expect(limit.addresses).toBe(0);
  });

  it('destroys, uncounted, a connection already gone before it was seen (no address)', () => {
    const refused = jest.fn();
    const limit = new ConnectionLimit(1, refused);
    const gone = fakeSocket(undefined);
    limit.admit(gone);
    expect(gone.destroy).toHaveBeenCalled();
    expect(limit.addresses).toBe(0);
    // Refused by no bound: its peer had gone.
    expect(refused).not.toHaveBeenCalled();
  });

  // Counted by address, an IPv6 host had no bound: it picks a new source address from its /64
  // for each connection.
  it('counts an IPv6 address with its /64, an IPv4-mapped one as its IPv4 address', () => {
    const refused = jest.fn();
    const limit = new ConnectionLimit(2, refused);
    const sockets = ['2001:db8:1:2::a', '2001:db8:1:2:ffff::1', '2001:0db8:0001:0002::b'].map(
      fakeSocket,
    );
    const apart = fakeSocket('2001:db8:1:3::a');
    for (const socket of [...sockets, apart]) limit.admit(socket);
    expect([...sockets, apart].map((s) => s.destroy.mock.calls.length)).toEqual([0, 0, 1, 0]);
    expect(limit.heldBy('2001:db8:1:2::1234')).toBe(2);
    const v4 = ['::ffff:10.0.0.1', '10.0.0.1', '::FFFF:10.0.0.1'].map(fakeSocket);
    for (const socket of v4) limit.admit(socket);
    expect(v4.map((s) => s.destroy.mock.calls.length)).toEqual([0, 0, 1]);
    expect(refused).toHaveBeenCalledTimes(2);
  });

  it('names the /64 of every IPv6 spelling, and leaves other addresses whole', () => {
    for (const [address, group] of [
      ['2001:db8::1', '2001:db8:0:0::/64'],
      ['2001:DB8:0:0:1::', '2001:db8:0:0::/64'],
      ['::1', '0:0:0:0::/64'],
      ['::', '0:0:0:0::/64'],
      ['fd00:1:2:3:4:5:6:7', 'fd00:1:2:3::/64'],
      ['1:2:3:4:5:6:7::', '1:2:3:4::/64'],
      ['::ffff:192.0.2.1', '192.0.2.1'],
      ['64:ff9b::192.0.2.1', '64:ff9b::192.0.2.1'],
      ['fe80::1%eth0', 'fe80::1%eth0'],
      ['192.0.2.1', '192.0.2.1'],
    ])
      expect([address, addressGroup(address)]).toEqual([address, group]);
  });
});
