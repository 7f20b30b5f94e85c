// The hardware managers the agent serves steps from, merged with IPA's rules (hardware.py): each manager's
// support level is evaluated once; a manager at level 0 contributes nothing; for one step name the manager
// with the highest level wins, then the higher priority, then the first class name; the winners list under
// their manager, and every supported manager's version is in `hardware_manager_version`.
import { isDeepStrictEqual } from 'node:util';
import { errorText, VersionMismatch } from '../errors.ts';
import { hasTool } from '../exec.ts';
import type { Logger } from '../log.ts';
import { isObject } from '../parse.ts';
import { PHASES, type HardwareManager, type Phase, type StepDescriptor } from './step.ts';

/** A plugin (or a manager in one) the agent could not take, and why; its steps are absent. */
export interface PluginFailure {
  source: string;
  reason: string;
}

interface Ranked {
  manager: HardwareManager;
  className: string;
  support: number;
}

/** One step as get_<phase>_steps lists it. */
export interface ListedStep {
  step: string;
  priority: number;
  interface: string;
  reboot_requested: boolean;
  abortable: boolean;
  requires_ramdisk: boolean;
  argsinfo?: StepDescriptor['argsinfo'];
}

/** A step and the manager it comes from, in the order a request for it is tried. */
export interface Candidate {
  className: string;
  step: StepDescriptor;
}

const NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,99}$/;

/** Why `d` is not a usable step descriptor, or null. Plugins are outside input: every field is checked. */
export function descriptorProblem(d: unknown): string | null {
  if (!isObject(d)) return 'a step is not an object';
  if (typeof d.name !== 'string' || !NAME.test(d.name)) return `step name ${JSON.stringify(d.name)} is not a name`;
  const at = `step ${d.name}:`;
  if (d.interface !== 'deploy' && d.interface !== 'raid') return `${at} interface must be "deploy" or "raid"`;
  if (!isObject(d.phases)) return `${at} phases must be an object of {clean|deploy|service: priority}`;
  const phases = Object.entries(d.phases);
  if (phases.length === 0) return `${at} serves no phase`;
  for (const [phase, priority] of phases) {
    if (!PHASES.includes(phase as Phase)) return `${at} unknown phase ${JSON.stringify(phase)}`;
    if (typeof priority !== 'number' || !Number.isInteger(priority) || priority < 0 || priority > 999) {
      return `${at} the ${phase} priority must be an integer from 0 to 999`;
    }
  }
  for (const flag of ['abortable', 'reboot_requested', 'requires_ramdisk'] as const) {
    if (typeof d[flag] !== 'boolean') return `${at} ${flag} must be a boolean`;
  }
  if (d.argsinfo !== undefined) {
    if (!isObject(d.argsinfo)) return `${at} argsinfo must be an object`;
    for (const [arg, info] of Object.entries(d.argsinfo)) {
      if (!isObject(info) || typeof info.description !== 'string' || typeof info.required !== 'boolean') {
        return `${at} argsinfo.${arg} must be {description: string, required: boolean}`;
      }
    }
  }
  if (d.tool !== undefined && typeof d.tool !== 'string') return `${at} tool must be a string`;
  if (typeof d.run !== 'function') return `${at} run must be a function`;
  return null;
}

/** Why `m` is not a usable hardware manager, or null. */
export function managerProblem(m: unknown): string | null {
  if (!isObject(m)) return 'the manager is not an object';
  if (typeof m.name !== 'string' || !NAME.test(m.name)) return `manager name ${JSON.stringify(m.name)} is not a name`;
  if (m.className !== undefined && (typeof m.className !== 'string' || !NAME.test(m.className))) {
    return `manager ${m.name}: className must be a name`;
  }
  if (typeof m.version !== 'string' || m.version === '') return `manager ${m.name}: version must be a string`;
  if (typeof m.evaluateHardwareSupport !== 'function') {
    return `manager ${m.name}: evaluateHardwareSupport must be a function`;
  }
  if (!Array.isArray(m.steps)) return `manager ${m.name}: steps must be a list`;
  const seen = new Set<string>();
  for (const s of m.steps) {
    const why = descriptorProblem(s);
    if (why) return `manager ${m.name}: ${why}`;
    const name = (s as StepDescriptor).name;
    if (seen.has(name)) return `manager ${m.name}: step ${name} is declared twice`;
    seen.add(name);
  }
  return null;
}

export class StepCatalogue {
  private constructor(
    /** Supported managers, highest support first (ties in the order given). */
    private readonly ranked: readonly Ranked[],
    /** Plugins the agent could not take, and why. */
    readonly failures: readonly PluginFailure[],
  ) {}

  /**
   * Checks each manager and evaluates its support once. A manager that is malformed, whose evaluation throws,
   * or that takes a name already taken is left out and recorded in `failures`, the others serve.
   */
  static async build(
    managers: readonly { source: string; manager: unknown }[],
    failures: readonly PluginFailure[],
    log: Logger,
  ): Promise<StepCatalogue> {
    const ranked: Ranked[] = [];
    const failed = [...failures];
    for (const { source, manager } of managers) {
      const why = managerProblem(manager);
      if (why) {
        failed.push({ source, reason: why });
        continue;
      }
      const m = manager as HardwareManager;
      const className = m.className ?? m.name;
      if (ranked.some((r) => r.manager.name === m.name || r.className === className)) {
        failed.push({ source, reason: `manager ${m.name}: another manager has its name` });
        continue;
      }
      let support: number;
      try {
        support = await m.evaluateHardwareSupport();
      } catch (err) {
        failed.push({ source, reason: `manager ${m.name}: evaluateHardwareSupport failed: ${errorText(err)}` });
        continue;
      }
      if (typeof support !== 'number' || !Number.isInteger(support) || support < 0) {
        failed.push({ source, reason: `manager ${m.name}: support level ${String(support)} is not an integer >= 0` });
        continue;
      }
      if (support === 0) {
        log.info({ manager: m.name, source }, 'hardware manager does not support this machine: none of its steps');
        continue;
      }
      ranked.push({ manager: m, className, support });
    }
    for (const f of failed) log.error({ plugin: f.source, why: f.reason }, 'hardware manager plugin left out');
    // Array.prototype.sort is stable: equal levels keep the order given (built-in first, then plugin files by name).
    ranked.sort((a, b) => b.support - a.support);
    log.info(
      { managers: ranked.map((r) => ({ name: r.manager.name, version: r.manager.version, support: r.support })) },
      'hardware managers',
    );
    return new StepCatalogue(ranked, failed);
  }

  /** `{name: version}` of every supported manager: what the conductor records and sends back. */
  versions(): Record<string, string> {
    return Object.fromEntries(this.ranked.map((r) => [r.manager.name, r.manager.version]));
  }

  /** The managers, for a report: name, class, version, support level and step names. */
  managers(): { name: string; className: string; version: string; support: number; steps: string[] }[] {
    return this.ranked.map((r) => ({
      name: r.manager.name,
      className: r.className,
      version: r.manager.version,
      support: r.support,
      steps: r.manager.steps.map((s) => s.name),
    }));
  }

  /**
   * Every manager's `step` for `phase`, in IPA's order of preference: support level, then priority, then class
   * name. The first is the one listed; a request runs it, and the next ones only if it declines the hardware.
   */
  candidates(phase: Phase, name: string): Candidate[] {
    const found: (Candidate & { support: number; priority: number })[] = [];
    for (const r of this.ranked) {
      const step = r.manager.steps.find((s) => s.name === name);
      const priority = step?.phases[phase];
      if (step && priority !== undefined) found.push({ className: r.className, step, support: r.support, priority });
    }
    found.sort((a, b) => b.support - a.support || b.priority - a.priority || (a.className < b.className ? -1 : 1));
    return found.map(({ className, step }) => ({ className, step }));
  }

  /**
   * The candidates whose tool this machine has, in the same order: what list() offers is what a request runs
   * (a step whose tool is missing is passed over for the next manager's, as in the list).
   */
  async available(phase: Phase, name: string): Promise<Candidate[]> {
    const offered = toolCheck();
    const found: Candidate[] = [];
    for (const c of this.candidates(phase, name)) if (await offered(c.step)) found.push(c);
    return found;
  }

  /**
   * IPA's get_<phase>_steps result: the winning steps under their manager's class name, and the versions.
   * A step whose tool this machine lacks is not offered, so that Ironic refuses it up front.
   */
  async list(phase: Phase): Promise<Record<string, unknown>> {
    const byName = new Map<string, Candidate>();
    const offered = toolCheck();
    for (const r of this.ranked) {
      for (const s of r.manager.steps) {
        if (s.phases[phase] === undefined || byName.has(s.name) || !(await offered(s))) continue;
        const winner = this.candidates(phase, s.name);
        for (const c of winner) {
          if (await offered(c.step)) {
            byName.set(s.name, c);
            break;
          }
        }
      }
    }
    const lists: Record<string, ListedStep[]> = {};
    for (const r of this.ranked) {
      const mine = r.manager.steps.filter((s) => byName.get(s.name)?.step === s);
      if (mine.length > 0) lists[r.className] = mine.map((s) => listedStep(s, phase));
    }
    return { [`${phase}_steps`]: lists, hardware_manager_version: this.versions() };
  }

  /** Throws VersionMismatch (→ CLEAN_VERSION_MISMATCH) when the conductor recorded other versions than ours. */
  checkVersions(provided: unknown): void {
    // A conductor that never recorded versions sends nothing (or an empty object): nothing to compare.
    if (provided === undefined || provided === null) return;
    if (typeof provided === 'object' && Object.keys(provided).length === 0) return;
    const ours = this.versions();
    if (!isDeepStrictEqual(provided, ours)) {
      throw new VersionMismatch(
        `Current versions: ${JSON.stringify(ours)}, versions provided by node: ${JSON.stringify(provided)}`,
      );
    }
  }
}

/** A step as get_<phase>_steps lists it. */
export function listedStep(s: StepDescriptor, phase: Phase): ListedStep {
  return {
    step: s.name,
    priority: s.phases[phase]!,
    interface: s.interface,
    reboot_requested: s.reboot_requested,
    // Ironic aborts clean and service steps only; IPA lists no deploy step as abortable.
    abortable: phase !== 'deploy' && s.abortable,
    requires_ramdisk: s.requires_ramdisk,
    ...(s.argsinfo ? { argsinfo: s.argsinfo } : {}),
  };
}

/** Whether a step's tool is on this machine, each tool looked up once per call of the returned check. */
function toolCheck(): (s: StepDescriptor) => Promise<boolean> {
  const hasTools = new Map<string, boolean>();
  return async (s) => {
    if (!s.tool) return true;
    if (!hasTools.has(s.tool)) hasTools.set(s.tool, await hasTool(s.tool));
    return hasTools.get(s.tool)!;
  };
}
