// Errors of the conductor link (IPA's names). Both end the agent process with a one-line reason,
// as in IPA, where the service manager then restarts the agent.
import { AgentError } from '../errors.ts';

export class LookupNodeError extends AgentError {
  static override summary = 'Error getting configuration from Ironic';
}

export class LookupAgentIPError extends AgentError {
  static override summary = 'Error finding IP for Ironic Agent';
}

/** No physical NIC with a MAC appeared: lookup has nothing to ask with. */
export class NoNetworkError extends AgentError {
  static override summary = 'No network interface found';
}
