// Executable steps: an operator's program (a shell script, a vendor tool) as a step. A manifest names the
// program and the step's descriptor; the agent runs the program with the step's args as JSON on stdin, logs
// each line it prints as it prints it, stops it (and what it started) when the step is cancelled, and reads
// its exit status as one of IPA's error classes (EXIT below, docs/operating.md).
import { writeFile } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { chooseRootDevice, rootHintsOf } from '../disk/root-device.ts';
import { IncompatibleHardwareMethodError, InvalidCommandParamsError } from '../errors.ts';
import { runStreamed } from '../exec.ts';
import { withTempDir } from '../host/temp-dir.ts';
import { isObject } from '../parse.ts';
import { descriptorProblem } from './catalogue.ts';
import { PHASE_ERROR } from './dispatch.ts';
import type { HardwareManager, StepContext, StepDescriptor } from './step.ts';

/** What a program's exit status means. Anything else non-zero is the phase's error (CleaningError, …). */
export const EXIT = {
  OK: 0,
  /** The program refused its args (InvalidCommandParamsError); it must have changed nothing. */
  INVALID_ARGS: 2,
  /** Not this machine's hardware (IncompatibleHardwareMethodError): the next manager with the step runs it. */
  INCOMPATIBLE: 3,
} as const;

/** Lines a program prints beyond this many go unlogged (a counter says how many), so a chatty tool cannot fill memory. */
const MAX_LOGGED_LINES = 10_000;
const MAX_LINE = 4096;

interface ExecSpec {
  program: string;
  argv: string[];
  rootDevice: boolean;
}

async function runProgram(spec: ExecSpec, name: string, args: Readonly<Record<string, unknown>>, ctx: StepContext) {
  const node = ctx.node ?? {};
  const env: Record<string, string> = {
    INA_STEP: name,
    INA_PHASE: ctx.phase,
    INA_NODE_UUID: typeof node.uuid === 'string' ? node.uuid : '',
  };
  if (spec.rootDevice) {
    // The program writes the disk the agent chose through its guard, never one of its own choosing.
    env.INA_ROOT_DEVICE = (await chooseRootDevice(ctx, rootHintsOf(node))).path;
  }
  const log = ctx.log.child({ step: name, program: spec.program });
  log.info({ env }, 'running the step program');
  let lines = 0;
  // The node goes in a file, not the environment: a deploy step's node carries the config drive, which can be
  // larger than the kernel takes for one variable.
  const result = await withTempDir('ina-step-', async (dir) => {
    await writeFile(join(dir, 'node.json'), JSON.stringify(node), { mode: 0o600 });
    return runStreamed(spec.program, spec.argv, {
      input: JSON.stringify(args),
      signal: ctx.signal,
      env: { ...env, INA_NODE_FILE: join(dir, 'node.json') },
      onLine: (stream, line) => {
        if (++lines > MAX_LOGGED_LINES) return;
        log.info({ stream }, line.slice(0, MAX_LINE));
      },
    });
  });
  if (lines > MAX_LOGGED_LINES) log.warn({ unlogged: lines - MAX_LOGGED_LINES }, 'the program printed more lines');
  ctx.signal.throwIfAborted();
  const tail = result.stderrTail.join('\n').slice(-2000);
  const said = tail ? `: ${tail}` : '';
  if (result.exitCode === EXIT.OK) return null;
  if (result.exitCode === EXIT.INVALID_ARGS)
    throw new InvalidCommandParamsError(`step ${name} refused its args${said}`);
  if (result.exitCode === EXIT.INCOMPATIBLE) {
    throw new IncompatibleHardwareMethodError(`step ${name} does not apply to this hardware${said}`);
  }
  const how = result.exitCode === null ? `was killed by ${result.signal}` : `exited with status ${result.exitCode}`;
  throw new PHASE_ERROR[ctx.phase](`${ctx.phase} step ${name}: ${spec.program} ${how}${said}`);
}

// Unknown keys are refused, so that a misspelt `priority` or `abortable` is a load error, not a silent default.
// With them and every value's type checked, a manifest cannot nest deeper than argsinfo's three levels.
const MANIFEST_KEYS = ['name', 'class_name', 'version', 'support', 'steps'];
const STEP_KEYS = [
  'name',
  'program',
  'program_args',
  'root_device',
  'interface',
  'phases',
  'abortable',
  'reboot_requested',
  'requires_ramdisk',
  'argsinfo',
];

/**
 * The hardware manager a manifest declares (the manifest read and bounded by plugins.ts), or why it cannot be
 * one. `dir` is the manifest's folder: a relative program path is taken from there.
 */
export function managerFromManifest(manifest: unknown, dir: string): HardwareManager | string {
  if (!isObject(manifest)) return 'the manifest is not a JSON object';
  const stray = Object.keys(manifest).filter((k) => !MANIFEST_KEYS.includes(k));
  if (stray.length > 0) return `unknown manifest keys: ${stray.join(', ')}`;
  const { name, class_name, version, support, steps } = manifest;
  if (typeof support !== 'number' || !Number.isInteger(support) || support < 0) {
    return 'support must be an integer >= 0 (IPA: 1 generic, 2 mainline, 3 service provider)';
  }
  if (!Array.isArray(steps)) return 'steps must be a list';
  const built: StepDescriptor[] = [];
  for (const [i, s] of steps.entries()) {
    if (!isObject(s)) return `steps[${i}] is not an object`;
    const strayStep = Object.keys(s).filter((k) => !STEP_KEYS.includes(k));
    if (strayStep.length > 0) return `steps[${i}]: unknown keys: ${strayStep.join(', ')}`;
    if (typeof s.program !== 'string' || s.program === '') return `steps[${i}].program must be a path`;
    const argv = s.program_args ?? [];
    if (!Array.isArray(argv) || !argv.every((a) => typeof a === 'string')) {
      return `steps[${i}].program_args must be a list of strings`;
    }
    if (s.root_device !== undefined && typeof s.root_device !== 'boolean') {
      return `steps[${i}].root_device must be a boolean`;
    }
    const spec: ExecSpec = {
      program: isAbsolute(s.program) ? s.program : join(dir, s.program),
      argv,
      rootDevice: s.root_device === true,
    };
    const stepName = s.name;
    const step = {
      name: stepName,
      interface: s.interface ?? 'deploy',
      phases: s.phases,
      abortable: s.abortable ?? false,
      reboot_requested: s.reboot_requested ?? false,
      requires_ramdisk: s.requires_ramdisk ?? true,
      // Every argument an executable step takes is declared: none means none.
      argsinfo: s.argsinfo ?? {},
      run: (args: Readonly<Record<string, unknown>>, ctx: StepContext) => runProgram(spec, String(stepName), args, ctx),
    };
    const why = descriptorProblem(step);
    if (why) return why;
    built.push(step as StepDescriptor);
  }
  return {
    name: name as string,
    ...(class_name !== undefined ? { className: class_name as string } : {}),
    version: version as string,
    evaluateHardwareSupport: () => support,
    steps: built,
  };
}
