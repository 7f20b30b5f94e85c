// IPA's error classes and their one mapping to IPA's wire shapes: `command_error` inside a result, and the
// `{faultcode, faultstring}` envelope of an HTTP error. A class name is the wire `type`, so only IPA's classes
// live here; what the agent's own retry logic needs to know travels as fields (docs/architecture.md).

export interface CommandErrorBody {
  type: string;
  code: number;
  message: string;
  details: string;
}

export class AgentError extends Error {
  /** The class-level summary IPA puts in `message`; `details` says what happened this time. */
  static summary = 'An error occurred';
  static httpCode = 500;
  readonly details: string;

  constructor(details?: string) {
    const ctor = new.target as typeof AgentError;
    super(details ?? ctor.summary);
    this.details = details ?? ctor.summary;
    this.name = ctor.name;
  }

  get code(): number {
    return (this.constructor as typeof AgentError).httpCode;
  }

  get summary(): string {
    return (this.constructor as typeof AgentError).summary;
  }

  toCommandError(): CommandErrorBody {
    return { type: this.name, code: this.code, message: this.summary, details: this.details };
  }

  /** IPA's faultstring for a RESTError raised out of a handler. */
  get faultstring(): string {
    return `${this.summary}: ${this.details}`;
  }
}

// 400 family: bad requests. Raised before a command is recorded, they become HTTP errors.
export class InvalidContentError extends AgentError {
  static override summary = 'Invalid request body';
  static override httpCode = 400;
}
export class InvalidCommandError extends InvalidContentError {
  static override summary = 'Invalid command';
}
export class InvalidCommandParamsError extends InvalidContentError {
  static override summary = 'Invalid command parameters';
}

export class NotFound extends AgentError {
  static override summary = 'Not found';
  static override httpCode = 404;
}
export class RequestedObjectNotFoundError extends NotFound {
  constructor(kind: string, id: string) {
    super(`${kind} with id ${id} not found.`);
  }
}
export class DeviceNotFound extends NotFound {
  static override summary = 'Error finding the disk or partition device to deploy the image onto';
}

export class CommandExecutionError extends AgentError {
  static override summary = 'Command execution failed';
}
export class AgentIsBusy extends CommandExecutionError {
  static override summary = 'Agent is busy';
  static override httpCode = 409;
  constructor(commandName: string) {
    super(`executing command ${commandName}`);
  }
}
export class VersionMismatch extends AgentError {
  static override summary = 'Hardware managers version mismatch, reload agent with correct version';
  static override httpCode = 409;
}

export class ImageDownloadError extends AgentError {
  static override summary = 'Error downloading image';
  /**
   * Whether a fresh transfer from byte zero may succeed. False when the URLs' own retries are spent (another
   * round would only repeat them), when a server's answer is final, or when the image cannot fit.
   */
  readonly restartable: boolean;

  constructor(details?: string, facts: { restartable?: boolean } = {}) {
    super(details);
    this.restartable = facts.restartable ?? true;
  }
}
/** A server's answer that no retry can change (a 4xx other than 408 and 429). */
export class ImageDownloadFatalError extends ImageDownloadError {
  constructor(details?: string) {
    super(details, { restartable: false });
  }
}
/** The buffer cannot hold the image. */
export class ImageDownloadOutofSpaceError extends ImageDownloadError {
  constructor(details?: string) {
    super(details, { restartable: false });
  }
}
export class ImageDownloadTimeoutError extends AgentError {
  static override summary = 'Timeout reached while downloading image';
  static override httpCode = 408;
}
export class ImageChecksumError extends AgentError {
  static override summary = 'Error verifying image checksum';
  /** The digest the downloaded bytes had, when they were hashed: a new one each time means damage in transit. */
  readonly actual?: string;

  constructor(details?: string, facts: { actual?: string } = {}) {
    super(details);
    this.actual = facts.actual;
  }
}
export class ImageWriteError extends AgentError {
  static override summary = 'Error writing image to device';
  /** The image does not fit its target (the device, or the buffer file's limit). */
  readonly tooLarge: boolean;
  /** A tool failed for want of a resource (memory) and may succeed when run again on the same input. */
  readonly transient: boolean;
  /**
   * The image is sound, but the route that streams it cannot take it (more data before its tables than the
   * spool may hold, internal snapshots): the buffered route can, from a fresh download.
   */
  readonly needsBuffer: boolean;

  constructor(details?: string, facts: { tooLarge?: boolean; transient?: boolean; needsBuffer?: boolean } = {}) {
    super(details);
    this.tooLarge = facts.tooLarge ?? false;
    this.transient = facts.transient ?? false;
    this.needsBuffer = facts.needsBuffer ?? false;
  }
}
export class InvalidImage extends AgentError {
  static override summary = 'The provided image is not valid for use';
}
export class ConfigDriveError extends AgentError {
  static override summary = 'Error writing configdrive to device';
}
export class DeploymentError extends AgentError {
  static override summary = 'Deploy step failed';
}
export class CleaningError extends AgentError {
  static override summary = 'Clean step failed';
}
export class ServicingError extends AgentError {
  static override summary = 'Service step failed';
}
export class BlockDeviceError extends AgentError {
  static override summary = 'Block device caused unknown error';
}
/** IPA's error for every software RAID refusal and failure (validation, holders, mdadm). */
export class SoftwareRAIDError extends AgentError {
  static override summary = 'Software RAID caused unknown error';
}
export class BlockDeviceEraseError extends AgentError {
  static override summary = 'Error erasing block device';
}
/** IPA's is a CleaningError whose `message` is its details (which device, and why), not a class summary. */
export class ProtectedDeviceError extends CleaningError {
  static override summary = 'Refusing to touch a protected device';
  override get summary(): string {
    return this.details;
  }
}
export class SystemRebootError extends AgentError {
  static override summary = 'Error rebooting system';
}
export class IncompatibleHardwareMethodError extends AgentError {
  static override summary = 'HardwareManager method is not compatible with hardware';
}
export class HardwareManagerMethodNotFound extends AgentError {
  static override summary = 'No HardwareManager found to handle method';
}
export class HardwareManagerConfigurationError extends AgentError {
  static override summary = 'Hardware manager configuration error';
}
/** An external tool is missing or failed; details carry the command line, exit code and stderr. */
export class ToolError extends CommandExecutionError {
  /** The tool's exit status when it ran and failed; null when it never ran, timed out or was cancelled. */
  constructor(
    details: string,
    readonly exitCode: number | null = null,
  ) {
    super(details);
  }
}

/** Any thrown value as a command error: our own errors keep their type, anything else is wrapped. */
export function toCommandError(err: unknown, wrap: 'wrap' | 'keep-type'): CommandErrorBody {
  if (err instanceof AgentError) return err.toCommandError();
  const text = err instanceof Error ? err.message : String(err);
  if (wrap === 'keep-type' && err instanceof Error) {
    return { type: err.name || 'Error', code: 500, message: CommandExecutionError.summary, details: text };
  }
  return new CommandExecutionError(text).toCommandError();
}

export function errorText(err: unknown): string {
  if (err instanceof AgentError) return err.details;
  return err instanceof Error ? err.message : String(err);
}
