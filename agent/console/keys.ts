// Maps raw terminal input to console actions (pure, so the key table is unit-tested).
export type KeyAction =
  | 'log'
  | 'commands'
  | 'shell'
  | 'back'
  | 'up'
  | 'down'
  | 'page-up'
  | 'page-down'
  | 'refresh'
  | null;

const TABLE: Record<string, KeyAction> = {
  l: 'log',
  L: 'log',
  c: 'commands',
  C: 'commands',
  s: 'shell',
  S: 'shell',
  q: 'back',
  Q: 'back',
  '\x1b': 'back',
  r: 'refresh',
  '\x0c': 'refresh',
  k: 'up',
  j: 'down',
  '\x1b[A': 'up',
  '\x1b[B': 'down',
  '\x1b[5~': 'page-up',
  '\x1b[6~': 'page-down',
  ' ': 'page-down',
  b: 'page-up',
};

export function keyAction(input: string): KeyAction {
  return TABLE[input] ?? null;
}

/** One read from the terminal can hold several keys (typed fast, pasted, or sent by a program). */
export function splitKeys(input: string): string[] {
  return input.match(/\x1b\[[0-9;]*[~A-Za-z]|[\s\S]/g) ?? [];
}
