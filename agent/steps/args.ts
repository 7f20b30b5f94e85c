// A step's args against its argsinfo, before it runs: Ironic checks a deploy template or a manual clean the
// same way, but a request may come from elsewhere (or from an older conductor), and a step must not start on
// arguments it does not take.
import { InvalidCommandParamsError } from '../errors.ts';
import type { StepDescriptor } from './step.ts';

export function checkArgs(step: StepDescriptor, args: Readonly<Record<string, unknown>>): void {
  const info = step.argsinfo;
  if (!info) return;
  const unexpected = Object.keys(args).filter((k) => !Object.hasOwn(info, k));
  const missing = Object.entries(info)
    .filter(([k, v]) => v.required && (args[k] === undefined || args[k] === null))
    .map(([k]) => k);
  const why: string[] = [];
  if (unexpected.length > 0) why.push(`these unexpected arguments: ${unexpected.sort().join(', ')}`);
  if (missing.length > 0) why.push(`these missing required arguments: ${missing.sort().join(', ')}`);
  if (why.length > 0) throw new InvalidCommandParamsError(`step ${step.name} has ${why.join('; and ')}`);
}
