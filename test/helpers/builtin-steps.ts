// The agent's own built-in steps as get_<phase>_steps lists them, and the versions a conductor records, for
// tests that send a step as a conductor would.
import { listedStep } from '../../agent/steps/catalogue.ts';
import { BUILTIN_STEPS, GENERIC_NAME, GENERIC_VERSION } from '../../agent/steps/builtin.ts';
import type { Phase } from '../../agent/steps/step.ts';

export function builtinStep(phase: Phase, name: string): Record<string, unknown> {
  const s = BUILTIN_STEPS.find((x) => x.name === name && x.phases[phase] !== undefined);
  if (!s) throw new Error(`no built-in ${phase} step ${name}`);
  return { ...listedStep(s, phase) };
}

export function hardwareManagerVersions(): Record<string, string> {
  return { [GENERIC_NAME]: GENERIC_VERSION };
}
