// The discovery documents at `/` and `/v1/`, with links built from the request's own origin.

function versionRef(root: string) {
  return {
    id: 'v1',
    links: [
      { href: `${root}/v1`, rel: 'self' },
      { href: 'https://docs.openstack.org/ironic-python-agent/', rel: 'describedby', type: 'text/html' },
    ],
  };
}

export function rootDocument(root: string) {
  const v = versionRef(root);
  return {
    name: 'OpenStack Ironic Python Agent API',
    description: 'Ironic Python Agent is a provisioning agent for OpenStack Ironic',
    versions: [v],
    default_version: v,
  };
}

export function v1Document(root: string) {
  return {
    ...versionRef(root),
    commands: [
      { href: `${root}/v1/commands`, rel: 'self' },
      { href: `${root}/commands`, rel: 'bookmark' },
    ],
    status: [
      { href: `${root}/v1/status`, rel: 'self' },
      { href: `${root}/status`, rel: 'bookmark' },
    ],
    media_types: [{ base: 'application/json', type: 'application/vnd.openstack.ironic-python-agent.v1+json' }],
  };
}
