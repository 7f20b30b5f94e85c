// The agent's logger and its ring of recent lines (what the system logs archive's agent.log holds): each logger
// made has its own ring, child loggers write into their parent's, and the ring keeps only the newest lines.
import { describe, expect, it } from 'vitest';
import { createLogger, LogRing } from '../agent/log.ts';

const messages = (ring: LogRing) => ring.tail().map((l) => (JSON.parse(l) as { msg: string }).msg);

describe('createLogger', () => {
  it("keeps the logger's lines, and its children's, in its own ring", () => {
    const first = createLogger({ debug: false, quiet: true });
    const second = createLogger({ debug: false, quiet: true });
    first.log.info('one');
    first.log.child({ disk: '/dev/loop9' }).warn('two');
    first.log.debug('below the level');
    second.log.info('elsewhere');
    expect(messages(first.ring)).toEqual(['one', 'two']);
    expect(messages(second.ring)).toEqual(['elsewhere']);
  });

  it('with debug, the ring holds debug lines too', () => {
    const { log, ring } = createLogger({ debug: true, quiet: true });
    log.debug('detail');
    expect(messages(ring)).toEqual(['detail']);
  });
});

describe('LogRing', () => {
  it('drops the oldest lines past its capacity; tail(n) is the newest n', () => {
    const ring = new LogRing(3);
    ring.write('a\nb\n');
    ring.write('c\n\nd\n');
    expect(ring.tail()).toEqual(['b', 'c', 'd']);
    expect(ring.tail(2)).toEqual(['c', 'd']);
  });
});
