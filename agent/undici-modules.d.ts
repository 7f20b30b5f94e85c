// Types for the undici modules agent/undici.ts imports by path (undici types only its index).
declare module 'undici/lib/dispatcher/agent.js' {
  import { Agent } from 'undici';
  export default Agent;
}
declare module 'undici/lib/dispatcher/pool.js' {
  import { Pool } from 'undici';
  export default Pool;
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
  import type { Dispatcher } from 'undici';
  /** undici's API functions, each called with a dispatcher as `this`. */
  const api: {
    request(this: Dispatcher, opts: Dispatcher.RequestOptions): Promise<Dispatcher.ResponseData>;
    connect: Dispatcher['connect'];
  };
  export default api;
}
