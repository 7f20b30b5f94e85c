// Types for the undici modules agent/undici.ts imports by path (undici types only its index).
declare module 'undici/lib/dispatcher/agent.js' {
  import { Agent } from 'undici';
  export default Agent;
}
declare module 'undici/lib/dispatcher/dispatcher.js' {
  import { Dispatcher } from 'undici';
  export default Dispatcher;
}
declare module 'undici/lib/dispatcher/proxy-agent.js' {
  import { ProxyAgent } from 'undici';
  export default ProxyAgent;
}
declare module 'undici/lib/interceptor/redirect.js' {
  import { interceptors } from 'undici';
  const redirect: typeof interceptors.redirect;
  export default redirect;
}
declare module 'undici/lib/api/index.js' {
  const api: Record<string, unknown>;
  export default api;
}
declare module 'undici/lib/web/fetch/headers.js' {
  export { Headers } from 'undici';
}
declare module 'undici/lib/web/fetch/response.js' {
  export { Response } from 'undici';
}
declare module 'undici/lib/web/fetch/request.js' {
  export { Request } from 'undici';
}
declare module 'undici/lib/web/websocket/events.js' {
  export { CloseEvent } from 'undici';
}
