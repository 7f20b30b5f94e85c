// What an `execute_<type>_step` result echoes of the step it ran. IPA echoes the step as sent, args and all,
// and every `GET /v1/commands/` sends it again: a 40 MiB config drive (twice in write_image's args, as
// `configdrive` and as `image_info.configdrive`) made each poll tens of MiB. The conductor reads only the step's
// `interface` and `step` from the echo (Ironic's `conductor_steps.is_equivalent`), so large strings in args are replaced by a short note of
// their size and digest, once, when the result is recorded.
import { createHash } from 'node:crypto';
import { isObject } from '../parse.ts';

/** Strings in args up to this many UTF-8 bytes are echoed as they came. */
export const ECHO_STRING_BYTES = 4096;

function bounded(v: unknown): unknown {
  if (typeof v === 'string') {
    const bytes = Buffer.byteLength(v, 'utf8');
    if (bytes <= ECHO_STRING_BYTES) return v;
    const digest = createHash('sha256').update(v, 'utf8').digest('hex');
    return `<${bytes} bytes omitted, sha256 ${digest}>`;
  }
  if (Array.isArray(v)) return v.map(bounded);
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, bounded(x)]));
  return v;
}

/** The result's key that echoes the step, for a method that runs steps (`execute_deploy_step` → `deploy_step`). */
export function echoKey(method: string): string | undefined {
  const m = /^execute_([a-z]+)_step$/.exec(method);
  return m ? `${m[1]}_step` : undefined;
}

/** `result` with its echoed step's args bounded; the step's other keys and the rest of the result stay. */
export function boundStepEcho(result: unknown, method: string): unknown {
  const key = echoKey(method);
  if (!key || !isObject(result)) return result;
  const step = result[key];
  if (!isObject(step) || !isObject(step.args)) return result;
  return { ...result, [key]: { ...step, args: bounded(step.args) } };
}
