// panva's certified node-oidc-provider, configured by the test that starts it:
//   node server.mjs '<json config>'
// config: { clients: [...], accounts: { sub: {claims} }, registration?: bool,
//           resource?: { url, scope } }
// Listens on a free loopback port, prints the issuer URL on the first line of stdout, and
// serves until killed. The provider's development interactions (login + consent pages) stand
// in for a company login page; any password is accepted for a known account.
import http from "node:http";
import Provider, { errors } from "oidc-provider";

const config = JSON.parse(process.argv[2]);
const server = http.createServer();
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: config.clients,
  claims: {
    openid: ["sub"],
    email: ["email", "email_verified"],
    profile: ["name"],
    groups: ["groups"],
  },
  scopes: ["openid", "offline_access", "email", "profile", "groups"],
  features: {
    devInteractions: { enabled: true },
    revocation: { enabled: true },
    // RFC 7591 dynamic client registration, when the test asks (MCP authorization servers).
    registration: { enabled: Boolean(config.registration) },
    // RFC 8707: one protected resource (an MCP server) with JWT access tokens, when asked.
    resourceIndicators: {
      enabled: true,
      defaultResource: () => undefined,
      useGrantedResource: () => true,
      getResourceServerInfo(ctx, indicator) {
        if (config.resource && indicator === config.resource.url) {
          return { scope: config.resource.scope, audience: indicator, accessTokenFormat: "jwt" };
        }
        throw new errors.InvalidTarget();
      },
    },
  },
  async findAccount(ctx, sub) {
    const claims = config.accounts[sub];
    if (!claims) return undefined;
    return { accountId: sub, async claims() { return { sub, ...claims }; } };
  },
  // Refresh tokens for clients that may use them and asked for offline_access (with consent).
  ttl: { AccessToken: 600, IdToken: 600, RefreshToken: 86400, Grant: 86400, Session: 3600,
         Interaction: 600, AuthorizationCode: 60 },
});
provider.on("server_error", (ctx, err) => console.error("server_error", err));
server.on("request", provider.callback());
console.log(issuer);
