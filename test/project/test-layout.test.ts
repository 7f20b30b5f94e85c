// The tests are laid out as the code is (docs/testing.md): a folder under test/ is a folder of agent/ (test/disk/
// holds the tests of agent/disk/, test/image/qcow2/ those of agent/image/qcow2/) or one of the project-wide
// folders below, and a test file directly in test/ is named after a top-level module of agent/. A test's vitest
// project is in its name (vitest.config.ts): one that attaches loop devices or makes network namespaces needs root,
// so it is a `*.device.test.ts`, never in the fast project that runs as a user.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const REPO = resolve(import.meta.dirname, '..', '..');
const TESTS = join(REPO, 'test');

/** Folders of test/ that mirror no agent/ folder, and what they hold. Their insides are their own. */
const PROJECT_WIDE: Record<string, string> = {
  helpers: 'code the tests share',
  fixtures: 'recorded inputs',
  project: 'checks over the whole repository: lint, layering, this layout, docs run verbatim, pinned imports',
  'image-build': "the ramdisk's own files (image-build/rootfs) run for real",
  e2e: 'the ramdisk booted in QEMU (its own vitest configuration)',
  ironic: 'a real Ironic conductor driving the agent (its own vitest configuration)',
  fullloop: 'a whole deploy with a real conductor, BMC and cloud image (its own vitest configuration)',
};

function folders(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => [join(dir, e.name), ...folders(join(dir, e.name))]);
}

/** The mirrored folders: every folder under test/ outside the project-wide ones. */
function mirrored(): string[] {
  return folders(TESTS).filter((d) => !(relative(TESTS, d).split('/')[0]! in PROJECT_WIDE));
}

const testFiles = (dir: string) => readdirSync(dir).filter((f) => f.endsWith('.test.ts'));

describe('the test layout', () => {
  it('has a folder of agent/ for each test folder that is not project-wide', () => {
    const strays = mirrored()
      .map((d) => relative(TESTS, d))
      .filter((rel) => !(existsSync(join(REPO, 'agent', rel)) && statSync(join(REPO, 'agent', rel)).isDirectory()));
    expect(strays, 'test folders with no agent/ folder of that name: use one, or declare it in PROJECT_WIDE').toEqual(
      [],
    );
  });

  it('names each test file directly in test/ after a top-level module of agent/', () => {
    const modules = readdirSync(join(REPO, 'agent')).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'));
    const names = modules.map((f) => f.slice(0, -'.ts'.length));
    const strays = testFiles(TESTS).filter((f) => {
      const base = f.replace(/(\.device|\.corpora)?\.test\.ts$/, '');
      return !names.some((n) => base === n || base.startsWith(`${n}-`));
    });
    expect(strays, 'test files in test/ itself that no agent/*.ts names: move them to their folder').toEqual([]);
  });

  it('names a test that attaches loop devices or makes network namespaces *.device.test.ts', () => {
    const files = [TESTS, ...mirrored(), join(TESTS, 'project'), join(TESTS, 'image-build')].flatMap((d) =>
      existsSync(d) ? testFiles(d).map((f) => join(d, f)) : [],
    );
    expect(files.length).toBeGreaterThan(50);
    const needsRoot = (text: string) => /helpers\/loop\.ts'/.test(text) || /["']netns["']/.test(text);
    const misnamed = files
      .filter((f) => !f.endsWith('.device.test.ts') && needsRoot(readFileSync(f, 'utf8')))
      .map((f) => relative(REPO, f));
    expect(misnamed, 'these need root: name them *.device.test.ts').toEqual([]);
  });
});
