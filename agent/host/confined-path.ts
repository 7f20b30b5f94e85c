// Paths inside a filesystem the agent mounted from a deployed image, used from outside it (a file written, a folder
// mounted on). The image is the tenant's: a symlink in it (`etc -> /etc`, `boot -> /usr/bin`) is resolved by the
// kernel against the ramdisk's root, so every route is followed one component at a time and refused when it
// leaves the image's filesystem.
import { lstat, mkdir, realpath, stat } from 'node:fs/promises';
import { isAbsolute, join, relative } from 'node:path';

/** Whether something is at `path` (following symlinks): for probing the ramdisk's own paths, not an image's. */
export async function pathExists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

export interface ConfinedOptions {
  /** Make missing folders on the way (with this mode), each only once the one above it proved to be inside. */
  makeDirs?: { mode?: number };
  /** The error to throw, given why (`<relPath> leads outside …`, `<relPath> is a symlink …`). */
  refuse: (why: string) => Error;
}

/**
 * `relPath` inside `root`, with every folder on the way resolved and proved to be inside it; the last component
 * is not followed and must not be a symlink. Missing folders are made only with `makeDirs`, otherwise a missing
 * one is refused.
 */
export async function confinedPath(root: string, relPath: string, o: ConfinedOptions): Promise<string> {
  const realRoot = await realpath(root);
  const outside = () => o.refuse(`${relPath} leads outside its filesystem`);
  const names = relPath.split('/').filter((n) => n !== '' && n !== '.');
  const last = names.pop();
  if (last === undefined || last === '..') throw outside();
  let dir = realRoot;
  for (const name of names) {
    const next = join(dir, name);
    if (!(await lstat(next).catch(() => null))) {
      if (!o.makeDirs) throw o.refuse(`${relPath}: ${name} is missing`);
      await mkdir(next, o.makeDirs.mode !== undefined ? { mode: o.makeDirs.mode } : {});
    }
    dir = await realpath(next);
    const rel = relative(realRoot, dir);
    if (rel.startsWith('..') || isAbsolute(rel)) throw outside();
  }
  const final = join(dir, last);
  if ((await lstat(final).catch(() => null))?.isSymbolicLink()) throw o.refuse(`${relPath} is a symlink in the image`);
  return final;
}

/** A folder inside `root` to mount on: confined as above, and a real folder (not a symlink, not a file). */
export async function confinedDir(root: string, relPath: string, refuse: (why: string) => Error): Promise<string> {
  const path = await confinedPath(root, relPath, { refuse });
  const st = await lstat(path).catch(() => null);
  if (!st) throw refuse(`${relPath} is missing`);
  if (!st.isDirectory()) throw refuse(`${relPath} is not a folder`);
  return path;
}
