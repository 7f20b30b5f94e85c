import { readFileSync } from 'node:fs';

// Read from package.json at start; the ramdisk bundle inlines it at build time instead.
declare const __AGENT_VERSION__: string | undefined;

function readVersion(): string {
  if (typeof __AGENT_VERSION__ === 'string') return __AGENT_VERSION__;
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

export const AGENT_VERSION = readVersion();
