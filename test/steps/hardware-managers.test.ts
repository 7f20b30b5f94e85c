// Hardware managers: IPA's merge rules on the catalogue itself, then plugins from a folder the test writes,
// through the agent's API over loopback: executable steps (real shell scripts: args on stdin, output in the log,
// exit statuses as error classes, a cancel that ends the script and what it started) and an ES module manager.
// A broken plugin leaves the agent serving, with the reason in the log and in GET /v1/commands/.
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runStreamed } from '../../agent/exec.ts';
import { nullLogger } from '../../agent/log.ts';
import { GENERIC_MANAGER } from '../../agent/steps/builtin.ts';
import { StepCatalogue } from '../../agent/steps/catalogue.ts';
import { executeStep } from '../../agent/steps/dispatch.ts';
import type { TaskContext } from '../../agent/services.ts';
import type { HardwareManager, StepDescriptor } from '../../agent/steps/step.ts';
import { call, startAgent, type RunningAgent } from '../helpers/api-harness.ts';
import { runCommand, runToEnd } from '../helpers/image-agent.ts';

const ran: string[] = [];
function step(name: string, phases: StepDescriptor['phases'], extra: Partial<StepDescriptor> = {}): StepDescriptor {
  return {
    name,
    interface: 'deploy',
    phases,
    abortable: true,
    reboot_requested: false,
    requires_ramdisk: true,
    run: async () => {
      ran.push(name);
      return null;
    },
    ...extra,
  };
}
function manager(name: string, support: number, steps: StepDescriptor[], version = '1.0'): HardwareManager {
  return { name, className: `${name}Class`, version, evaluateHardwareSupport: () => support, steps };
}
const build = (...managers: unknown[]) =>
  StepCatalogue.build(
    managers.map((m, i) => ({ source: `m${i}`, manager: m })),
    [],
    nullLogger,
  );

describe('the merge rules (IPA hardware.py)', () => {
  it('the higher support level wins a shared step; each step lists under its manager; every version is listed', async () => {
    const vendor = manager('vendor', 3, [step('erase_devices', { clean: 5 }), step('flash_bios', { clean: 0 })]);
    const c = await build(GENERIC_MANAGER, vendor);
    const r = (await c.list('clean')) as {
      clean_steps: Record<string, { step: string; priority: number }[]>;
      hardware_manager_version: unknown;
    };
    expect(r.clean_steps.vendorClass!.map((s) => [s.step, s.priority])).toEqual([
      ['erase_devices', 5],
      ['flash_bios', 0],
    ]);
    expect(r.clean_steps.GenericHardwareManager!.map((s) => s.step)).not.toContain('erase_devices');
    expect(r.clean_steps.GenericHardwareManager!.map((s) => s.step)).toContain('erase_devices_metadata');
    expect(r.hardware_manager_version).toEqual({ vendor: '1.0', generic_hardware_manager: '1.2' });
    expect(c.candidates('clean', 'erase_devices').map((x) => x.className)).toEqual([
      'vendorClass',
      'GenericHardwareManager',
    ]);
  });

  it("a step whose tool is missing is passed over for the next manager's, in the list and when it runs", async () => {
    const who: string[] = [];
    const runs = (m: string) => async () => {
      who.push(m);
      return m;
    };
    const vendor = manager('vendor', 3, [
      step('flash', { clean: 5 }, { tool: 'ina-no-such-tool-0', run: runs('vendor') }),
    ]);
    const backup = manager('backup', 2, [step('flash', { clean: 5 }, { run: runs('backup') })]);
    const c = await build(vendor, backup);
    const listed = (await c.list('clean')) as { clean_steps: Record<string, { step: string }[]> };
    expect(listed.clean_steps.vendorClass).toBeUndefined();
    expect(listed.clean_steps.backupClass!.map((s) => s.step)).toEqual(['flash']);
    let node: unknown;
    const ctx = {
      log: nullLogger,
      signal: new AbortController().signal,
      progress: () => {},
      state: { status: { node: undefined }, update: (u: { node: unknown }) => (node = u.node) },
    } as unknown as TaskContext;
    const result = await executeStep(
      c,
      'clean',
      { step: { step: 'flash', interface: 'deploy' }, version: undefined },
      ctx,
    );
    expect(result).toBe('backup');
    expect(who).toEqual(['backup']);
    expect(node).toBeUndefined();
  });

  it('at equal support the higher priority wins, then the first class name; a manager left with no step vanishes from the lists but not from the versions', async () => {
    const a = manager('a', 2, [step('tune', { clean: 10 })]);
    const b = manager('b', 2, [step('tune', { clean: 20 })]);
    const c1 = await build(a, b);
    expect(Object.keys(((await c1.list('clean')) as { clean_steps: object }).clean_steps)).toEqual(['bClass']);
    expect(c1.versions()).toEqual({ a: '1.0', b: '1.0' });
    const z = manager('z', 2, [step('tune', { clean: 10 })]);
    const c2 = await build(z, a);
    expect(c2.candidates('clean', 'tune').map((x) => x.className)).toEqual(['aClass', 'zClass']);
  });

  it('a phase lists only the steps that serve it, at that phase priority; deploy steps are never abortable', async () => {
    const m = manager('m', 2, [step('both', { clean: 7, deploy: 65 }), step('only_service', { service: 0 })]);
    const c = await build(m);
    const deploy = (await c.list('deploy')) as { deploy_steps: Record<string, Record<string, unknown>[]> };
    expect(deploy.deploy_steps.mClass).toEqual([
      {
        step: 'both',
        priority: 65,
        interface: 'deploy',
        reboot_requested: false,
        abortable: false,
        requires_ramdisk: true,
      },
    ]);
    const service = (await c.list('service')) as { service_steps: Record<string, { step: string }[]> };
    expect(service.service_steps.mClass!.map((s) => s.step)).toEqual(['only_service']);
  });

  it('an unsupported manager contributes no step and no version', async () => {
    const c = await build(GENERIC_MANAGER, manager('absent', 0, [step('erase_devices', { clean: 100 })]));
    expect(c.versions()).toEqual({ generic_hardware_manager: '1.2' });
    expect(c.candidates('clean', 'erase_devices').map((x) => x.className)).toEqual(['GenericHardwareManager']);
    expect(c.failures).toEqual([]);
  });

  it('a version change is a mismatch: the conductor must refresh its steps', async () => {
    const c = await build(GENERIC_MANAGER, manager('vendor', 3, [], '2.0'));
    expect(() => c.checkVersions({ generic_hardware_manager: '1.2' })).toThrow(/Current versions/);
    expect(() => c.checkVersions({ generic_hardware_manager: '1.2', vendor: '2.0' })).not.toThrow();
  });

  it('a malformed manager, a bad descriptor, a failing support check or a taken name is left out with its reason', async () => {
    const c = await build(
      GENERIC_MANAGER,
      { name: 'no_version', evaluateHardwareSupport: () => 1, steps: [] },
      manager('bad_phase', 2, [step('x', { install: 1 } as never)]),
      manager('bad_priority', 2, [step('x', { clean: -1 })]),
      manager('bad_args', 2, [step('x', { clean: 0 }, { argsinfo: { a: { required: 'yes' } } as never })]),
      manager('twice', 2, [step('x', { clean: 0 }), step('x', { deploy: 0 })]),
      { ...manager('throws', 2, []), evaluateHardwareSupport: () => Promise.reject(new Error('no BMC')) },
      { ...manager('generic_hardware_manager', 5, []), className: 'Other' },
      manager('good', 2, [step('x', { clean: 0 })]),
    );
    expect(c.failures.map((f) => f.reason)).toEqual([
      'manager no_version: version must be a string',
      'manager bad_phase: step x: unknown phase "install"',
      'manager bad_priority: step x: the clean priority must be an integer from 0 to 999',
      'manager bad_args: step x: argsinfo.a must be {description: string, required: boolean}',
      'manager twice: step x is declared twice',
      'manager throws: evaluateHardwareSupport failed: no BMC',
      'manager generic_hardware_manager: another manager has its name',
    ]);
    expect(c.versions()).toEqual({ generic_hardware_manager: '1.2', good: '1.0' });
  });
});

/** A pino logger whose JSON lines the test reads. */
function capturingLogger() {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      done();
    },
  });
  return { log: pino({ level: 'info' }, sink), lines };
}

const SH = '#!/bin/sh\n';

/** Whether process `pid` still exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('plugins from a folder, through the API', () => {
  let dir: string;
  let out: string;
  let agent: RunningAgent;
  let captured: ReturnType<typeof capturingLogger>;
  const exec = (phase: string, name: string, args: Record<string, unknown>, version?: unknown) =>
    runToEnd(agent.url, `${phase}.execute_${phase}_step`, {
      step: { interface: 'deploy', step: name, args, priority: 0 },
      node: { uuid: 'n1', properties: {}, instance_info: {}, driver_internal_info: {} },
      ports: [],
      [`${phase}_version`]: version,
    });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ina-hwm-'));
    out = join(dir, 'out');
    const script = async (name: string, body: string) => {
      await writeFile(join(dir, name), SH + body);
      await chmod(join(dir, name), 0o755);
    };
    // args in, output out, exit status as asked for
    await script(
      'firmware.sh',
      `args=$(cat)
echo "step $INA_STEP in $INA_PHASE for $INA_NODE_UUID $(grep -o '"uuid":"[^"]*"' "$INA_NODE_FILE")"
printf '%s' "$args" > "${out}.$INA_STEP"
echo "a warning on stderr" >&2
case "$args" in *'"exit":'*) code=$(printf '%s' "$args" | sed 's/.*"exit":\\([0-9]*\\).*/\\1/'); exit "$code";; esac
exit 0
`,
    );
    // runs until stopped, and so does the child it started
    await script('forever.sh', `sleep 1000 &\necho "$!" > "${out}.child"\necho "$$" > "${out}.pid"\nwait\n`);
    await writeFile(
      join(dir, 'acme.json'),
      JSON.stringify({
        name: 'acme_firmware',
        class_name: 'AcmeFirmwareManager',
        version: '3.1',
        support: 3,
        steps: [
          {
            name: 'update_firmware',
            program: 'firmware.sh',
            phases: { clean: 0, deploy: 0, service: 0 },
            abortable: true,
            argsinfo: {
              version: { description: 'the firmware version', required: true },
              exit: { description: 'the exit status the script ends with', required: false },
            },
          },
          { name: 'hang', program: 'forever.sh', phases: { clean: 0 }, abortable: true },
        ],
      }),
    );
    // a lower-support manager with the same step, which runs where the first declines the hardware
    await writeFile(
      join(dir, 'backup.json'),
      JSON.stringify({
        name: 'backup_firmware',
        version: '1',
        support: 2,
        steps: [
          {
            name: 'update_firmware',
            program: join(dir, 'firmware.sh'),
            program_args: [],
            phases: { clean: 0 },
            argsinfo: {
              version: { description: 'the firmware version', required: true },
              exit: { description: 'ignored here', required: false },
            },
          },
        ],
      }),
    );
    // an ES module manager with a typed step
    await writeFile(
      join(dir, 'bios.mjs'),
      `import { writeFile } from 'node:fs/promises';
/** @type {import('../agent/steps/step.ts').HardwareManager} */
export const manager = {
  name: 'bios_settings',
  className: 'BiosSettingsManager',
  version: '0.4',
  evaluateHardwareSupport: () => 3,
  steps: [
    {
      name: 'apply_bios_settings',
      interface: 'deploy',
      phases: { clean: 0, deploy: 70 },
      abortable: false,
      reboot_requested: true,
      requires_ramdisk: true,
      argsinfo: { settings: { description: 'name=value pairs', required: true } },
      async run(args, ctx) {
        ctx.log.info({ settings: args.settings }, 'applying BIOS settings');
        await writeFile(${JSON.stringify(out)} + '.bios', JSON.stringify({ args, phase: ctx.phase, node: ctx.node.uuid }));
        return { applied: Object.keys(args.settings).length };
      },
    },
  ],
};
`,
    );
    // broken plugins: each is left out, the agent serves the rest
    await writeFile(join(dir, 'broken.json'), '{"name": "broken", ');
    await writeFile(
      join(dir, 'typo.json'),
      JSON.stringify({ name: 'typo', version: '1', support: 2, steps: [{ name: 's', program: 'x', priorty: 5 }] }),
    );
    await writeFile(join(dir, 'throws.mjs'), "throw new Error('vendor library missing');\n");
    await writeFile(join(dir, 'nothing.mjs'), 'export const other = 1;\n');
    await writeFile(join(dir, 'big.json'), `{"pad": "${'x'.repeat(70 * 1024)}"}`);
    captured = capturingLogger();
    agent = await startAgent({ 'ina-hardware-managers': dir }, undefined, captured.log);
  });

  afterAll(async () => {
    await agent?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('serves, lists each plugin step under its manager with its version, and says why the broken ones are absent', async () => {
    const r = await runToEnd(agent.url, 'clean.get_clean_steps', { node: {}, ports: [] });
    const steps = r.command_result.clean_steps as Record<string, { step: string; argsinfo?: unknown }[]>;
    expect(steps.AcmeFirmwareManager!.map((s) => s.step)).toEqual(['update_firmware', 'hang']);
    expect(steps.BiosSettingsManager!.map((s) => s.step)).toEqual(['apply_bios_settings']);
    expect(steps.backup_firmware).toBeUndefined();
    expect(steps.GenericHardwareManager!.map((s) => s.step)).toContain('erase_devices');
    expect(r.command_result.hardware_manager_version).toEqual({
      acme_firmware: '3.1',
      bios_settings: '0.4',
      backup_firmware: '1',
      generic_hardware_manager: '1.2',
    });
    const deploy = await runToEnd(agent.url, 'deploy.get_deploy_steps', { node: {}, ports: [] });
    expect(deploy.command_result.deploy_steps.BiosSettingsManager).toEqual([
      expect.objectContaining({ step: 'apply_bios_settings', priority: 70, reboot_requested: true }),
    ]);

    const history = (await call(`${agent.url}/v1/commands/`)).json.commands as Record<string, any>[];
    const report = history.find((c) => c.command_name === 'hardware.get_managers')!;
    expect(report.command_status).toBe('FAILED');
    expect(report.command_error.type).toBe('HardwareManagerConfigurationError');
    const details = report.command_error.details as string;
    expect(details).toMatch(/^5 hardware manager plugin\(s\) left out: /);
    expect(details).toContain(`${join(dir, 'big.json')}: not a readable JSON manifest: larger than 65536 bytes`);
    expect(details).toContain(`${join(dir, 'broken.json')}: not a readable JSON manifest`);
    expect(details).toContain(`${join(dir, 'nothing.mjs')}: exports neither \`manager\` nor a default`);
    expect(details).toContain(`${join(dir, 'throws.mjs')}: vendor library missing`);
    expect(details).toContain(`${join(dir, 'typo.json')}: steps[0]: unknown keys: priorty`);
    const logged = captured.lines.filter((l) => l.msg === 'hardware manager plugin left out');
    expect(logged.map((l) => l.plugin)).toEqual(
      ['big.json', 'broken.json', 'nothing.mjs', 'throws.mjs', 'typo.json'].map((f) => join(dir, f)),
    );
  });

  it('runs an executable step with its args on stdin and its output in the log', async () => {
    const version = (await runToEnd(agent.url, 'clean.get_clean_steps', {})).command_result.hardware_manager_version;
    const r = await exec('clean', 'update_firmware', { version: '2.7' }, version);
    expect(r.command_status).toBe('SUCCEEDED');
    expect(r.command_result).toEqual({
      clean_result: null,
      clean_step: expect.objectContaining({ step: 'update_firmware' }),
    });
    expect(JSON.parse(await readFile(`${out}.update_firmware`, 'utf8'))).toEqual({ version: '2.7' });
    const said = captured.lines.filter((l) => l.step === 'update_firmware' && l.stream);
    expect(said).toEqual([
      expect.objectContaining({ stream: 'stdout', msg: 'step update_firmware in clean for n1 "uuid":"n1"' }),
      expect.objectContaining({ stream: 'stderr', msg: 'a warning on stderr' }),
    ]);
  });

  it('checks args against argsinfo before the program runs', async () => {
    await rm(`${out}.update_firmware`, { force: true });
    for (const [args, why] of [
      [{}, /step update_firmware has these missing required arguments: version/],
      [{ version: '1', colour: 'red' }, /step update_firmware has these unexpected arguments: colour/],
    ] as const) {
      const r = await exec('deploy', 'update_firmware', args);
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error).toMatchObject({ type: 'InvalidCommandParamsError', details: expect.stringMatching(why) });
    }
    await expect(readFile(`${out}.update_firmware`)).rejects.toThrow(/ENOENT/);
  });

  it('maps exit statuses to IPA error classes; 3 passes the step to the next manager that has it', async () => {
    const refused = await exec('clean', 'update_firmware', { version: '1', exit: 2 });
    expect(refused.command_error).toMatchObject({
      type: 'InvalidCommandParamsError',
      details: 'step update_firmware refused its args: a warning on stderr',
    });
    const failed = await exec('deploy', 'update_firmware', { version: '1', exit: 5 });
    expect(failed.command_error).toMatchObject({
      type: 'DeploymentError',
      details: `deploy step update_firmware: ${join(dir, 'firmware.sh')} exited with status 5: a warning on stderr`,
    });
    expect((await exec('service', 'update_firmware', { version: '1', exit: 7 })).command_error?.type).toBe(
      'ServicingError',
    );
    // clean: acme declines (3), backup (support 2) runs the same script, which also says 3: nobody can
    const declined = await exec('clean', 'update_firmware', { version: '1', exit: 3 });
    expect(declined.command_error).toMatchObject({
      type: 'HardwareManagerMethodNotFound',
      details: expect.stringMatching(/^No HardwareManager could handle update_firmware: step update_firmware does not/),
    });
    const tried = captured.lines.filter((l) => l.msg === 'hardware manager declined the step').map((l) => l.manager);
    expect(tried).toEqual(['AcmeFirmwareManager', 'backup_firmware']);
    // deploy: only acme has it
    expect((await exec('deploy', 'update_firmware', { version: '1', exit: 3 })).command_error?.type).toBe(
      'HardwareManagerMethodNotFound',
    );
  });

  it('a cancel stops the program and the process it started, and the step fails', async () => {
    const started = await runCommand(
      agent.url,
      'clean.execute_clean_step',
      {
        step: { interface: 'deploy', step: 'hang', args: {} },
        node: {},
        ports: [],
      },
      false,
    );
    expect(started.json.command_status).toBe('RUNNING');
    const pidOf = async (f: string) => Number(await readFile(f, 'utf8').catch(() => '0'));
    await expect.poll(() => pidOf(`${out}.child`), { timeout: 20_000 }).toBeGreaterThan(0);
    await expect.poll(() => pidOf(`${out}.pid`), { timeout: 20_000 }).toBeGreaterThan(0);
    const [pid, child] = [await pidOf(`${out}.pid`), await pidOf(`${out}.child`)];
    expect(alive(pid) && alive(child)).toBe(true);
    const record = await agent.agent.executor.cancel('the test cancels the step');
    expect(record?.status).toBe('FAILED');
    expect(record?.error).toMatchObject({ type: 'CommandExecutionError', details: 'the test cancels the step' });
    expect(alive(pid)).toBe(false);
    await expect.poll(() => alive(child), { timeout: 20_000 }).toBe(false);
  });

  it('runs a module step with typed args, its context and its result', async () => {
    const r = await exec('deploy', 'apply_bios_settings', { settings: { HyperThreading: 'off', SRIOV: 'on' } });
    expect(r.command_status).toBe('SUCCEEDED');
    expect(r.command_result.deploy_result).toEqual({ applied: 2 });
    expect(JSON.parse(await readFile(`${out}.bios`, 'utf8'))).toEqual({
      args: { settings: { HyperThreading: 'off', SRIOV: 'on' } },
      phase: 'deploy',
      node: 'n1',
    });
    expect(captured.lines.some((l) => l.msg === 'applying BIOS settings')).toBe(true);
    // a phase the step does not serve
    expect((await exec('service', 'apply_bios_settings', { settings: {} })).command_error?.type).toBe(
      'HardwareManagerMethodNotFound',
    );
  });
});

describe('an executable step leaves nothing of its process group behind', () => {
  // The program backgrounds a helper that ignores SIGTERM (and whose own child inherits that), then ends or
  // waits; the helper's pipes go to /dev/null, so only the process group ties it to the step.
  const run = async (end: string, abort: boolean) => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hwm-group-'));
    try {
      const script = join(dir, 'step.sh');
      await writeFile(
        script,
        `${SH}sh -c 'trap "" TERM; sleep 300 & echo $! > ${dir}/sleep; wait' >/dev/null 2>&1 &
echo $! > ${dir}/helper
while [ ! -s ${dir}/sleep ]; do sleep 0.05; done
${end}
`,
      );
      await chmod(script, 0o755);
      const controller = new AbortController();
      const pids = async (): Promise<[number, number]> => [
        Number(await readFile(join(dir, 'helper'), 'utf8').catch(() => '0')),
        Number(await readFile(join(dir, 'sleep'), 'utf8').catch(() => '0')),
      ];
      const running = runStreamed(script, [], { input: '', signal: controller.signal, onLine: () => {}, graceMs: 300 });
      if (abort) {
        await expect.poll(async () => Math.min(...(await pids())), { timeout: 20_000 }).toBeGreaterThan(0);
        controller.abort();
      }
      await running;
      const [helper, sleeper] = await pids();
      expect(helper).toBeGreaterThan(0);
      expect(sleeper).toBeGreaterThan(0);
      // gone when runStreamed returns, not some time later
      expect(alive(helper)).toBe(false);
      expect(alive(sleeper)).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  it('when the program ends by itself', () => run('exit 0', false));
  it('when the step is aborted', () => run('wait', true));
});

describe('an agent with only broken plugins', () => {
  it('still serves the built-in steps, and an agent without a plugin folder records nothing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hwm-'));
    const agents: RunningAgent[] = [];
    try {
      await writeFile(join(dir, 'a.json'), '[]');
      agents.push(await startAgent({ 'ina-hardware-managers': dir }));
      const r = await runToEnd(agents[0]!.url, 'clean.get_clean_steps', {});
      expect(Object.keys(r.command_result.clean_steps)).toEqual(['GenericHardwareManager']);
      const history = (await call(`${agents[0]!.url}/v1/commands/`)).json.commands as { command_name: string }[];
      expect(history.map((c) => c.command_name)).toEqual(['hardware.get_managers', 'get_clean_steps']);
      agents.push(await startAgent({ 'ina-hardware-managers': join(dir, 'missing') }));
      expect((await call(`${agents[1]!.url}/v1/commands/`)).json.commands).toEqual([]);
    } finally {
      for (const a of agents) await a.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
