// The steps that write the instance: `write_image` runs standby.prepare_image's code, `inject_files` writes
// files into the written image's partitions.
import { injectFiles, parseInjectFiles, parseVerifyCa } from '../disk/inject-files.ts';
import { rootHintsOf } from '../disk/root-device.ts';
import { prepareImage } from '../image/prepare.ts';
import { isObject } from '../parse.ts';
import { parsePrepareImage } from './prepare-image-params.ts';
import type { ArgsInfo, StepContext } from './step.ts';

export async function writeImageStep(args: Readonly<Record<string, unknown>>, ctx: StepContext): Promise<unknown> {
  const { info, configdrive } = parsePrepareImage(args, ctx.config);
  return { result: `prepare_image: ${await prepareImage(ctx, { info, configdrive, hints: rootHintsOf(ctx.node) })}` };
}

export const INJECT_FILES_ARGSINFO: ArgsInfo = {
  files: {
    description: 'Files to inject: a list of {path, partition, content (base64), deleted, mode, dirmode, owner, group}',
    // IPA's: the files may come from the node's inject_files property alone.
    required: false,
  },
  verify_ca: { description: 'Whether to verify TLS certificates when fetching content', required: false },
};

export async function injectFilesStep(args: Readonly<Record<string, unknown>>, ctx: StepContext): Promise<null> {
  // the node's inject_files property first, then the step's files, as IPA merges them
  const node = ctx.node;
  const fromNode = parseInjectFiles(isObject(node?.properties) ? node.properties.inject_files : undefined);
  const files = [...fromNode, ...parseInjectFiles(args.files)];
  const verifyCa = parseVerifyCa(args.verify_ca);
  await injectFiles(ctx, files, rootHintsOf(node), { verifyCa, node, signal: ctx.signal });
  return null;
}
