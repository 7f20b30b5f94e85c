// rescue: `finalize_rescue`, sent on the first heartbeat in `rescue wait`. The password arrives hashed (newer
// Ironic sends only the hash; older ones first try the hash and fall back to plain text only if this fails), so a
// plain-text password is refused rather than hashed here. Then the agent stops serving, as IPA does.
import { CommandExecutionError, errorText, InvalidCommandParamsError } from '../../errors.ts';
import { CRYPT_HASH, setRescuePassword } from '../../host/rescue-user.ts';
import { optBool, reqString } from '../params.ts';
import { command, type Extension } from '../types.ts';

export const rescue: Extension = {
  finalize_rescue: command({
    mode: 'sync',
    parse: (p) => {
      const password = reqString(p, 'rescue_password');
      if (optBool(p, 'hashed') !== true) {
        throw new InvalidCommandParamsError(
          'Only a hashed rescue password is accepted (hashed: true); this agent does not take plain-text passwords',
        );
      }
      if (!CRYPT_HASH.test(password)) {
        throw new InvalidCommandParamsError('rescue_password must be a SHA-256 or SHA-512 crypt hash ($5$… or $6$…)');
      }
      return { hash: password };
    },
    run: async (p, ctx) => {
      const root = ctx.config.rescueRoot;
      if (!root)
        throw new CommandExecutionError(
          "Rescue needs --ina-rescue-root outside a ramdisk (the host's own users are never changed)",
        );
      try {
        await setRescuePassword(root, p.hash);
      } catch (err) {
        throw new CommandExecutionError(
          `Rescue Operation failed when writing the hashed rescue password: ${errorText(err)}`,
        );
      }
      ctx.log.info({ root }, 'rescue password set for the rescue user');
      ctx.host.quiesce('rescue');
      return null;
    },
  }),
};
