import { describe, expect, it } from 'vitest';
import { keyAction, splitKeys } from '../../agent/console/keys.ts';

describe('console keys', () => {
  it('maps letters and terminal escape sequences to actions', () => {
    expect(keyAction('l')).toBe('log');
    expect(keyAction('c')).toBe('commands');
    expect(keyAction('s')).toBe('shell');
    expect(keyAction('q')).toBe('back');
    expect(keyAction('\x1b')).toBe('back');
    expect(keyAction('\x1b[A')).toBe('up');
    expect(keyAction('\x1b[B')).toBe('down');
    expect(keyAction('\x1b[5~')).toBe('page-up');
    expect(keyAction('\x1b[6~')).toBe('page-down');
  });

  it('ignores everything else, Ctrl-C included (the console must not die)', () => {
    expect(keyAction('\x03')).toBeNull();
    expect(keyAction('x')).toBeNull();
    expect(keyAction('ls\r')).toBeNull();
  });

  it('splits one read into keys, escape sequences kept whole', () => {
    expect(splitKeys('qs')).toEqual(['q', 's']);
    expect(splitKeys('\x1b[A\x1b[Bl')).toEqual(['\x1b[A', '\x1b[B', 'l']);
    expect(splitKeys('\x1b[5~c')).toEqual(['\x1b[5~', 'c']);
    expect(splitKeys('\x1b')).toEqual(['\x1b']);
    expect(splitKeys('')).toEqual([]);
  });
});
