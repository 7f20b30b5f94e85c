// The shared libraries an ELF file asks for (DT_NEEDED) and its interpreter, read with binutils' readelf.
import { execFileSync } from 'node:child_process';

export interface ElfDeps {
  needed: string[];
  interpreter?: string;
}

/** Returns null for files that are not ELF (scripts, data). */
export function elfDeps(path: string): ElfDeps | null {
  let text: string;
  try {
    text = execFileSync('readelf', ['-dlW', path], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch {
    return null;
  }
  const needed = [...text.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]!);
  const interpreter = /Requesting program interpreter: ([^\]]+)\]/.exec(text)?.[1];
  return { needed, interpreter };
}
