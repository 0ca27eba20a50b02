// The game side of deep-link sign-in, for Node 18+ (node:http and fetch, no
// framework): the handler the webshop's deep link opens (the store's Game
// Authorize URL, here /oauth/authorize). It registers a one-time code for
// the game's signed-in player with the deeplink service and sends the
// browser back to the webshop with it, or, when the service refuses, shows
// why and sends the browser nowhere.
//
// Run it (TypeScript compiled by tsc, from this folder's package.json):
//   npm ci && npx tsc
//   DEEPLINK_API_BASE=https://deeplink.example.com DEEPLINK_STORE_ID=… DEEPLINK_API_KEY=… \
//     PORT=8090 node dist/authorize.js
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { randomBytes } from "node:crypto";

const apiBase = process.env.DEEPLINK_API_BASE ?? ""; // the deeplink service
const storeId = process.env.DEEPLINK_STORE_ID ?? ""; // your store's id
const apiKey = process.env.DEEPLINK_API_KEY ?? ""; // a secret: keep it on the server

// Who is signed in to the game: the fields of the registration body (the
// service's API reference, "Register an auth code"). client_reference_id
// is required; the others may be left out.
type Player = {
  client_reference_id: string;
  first_name?: string;
  last_name?: string;
  language?: string; // a tag such as "en" or "pt-BR"
  currency?: string; // ISO 4217, "GBP"
  country?: string; // ISO 3166-1 alpha-2, "GB"
  timezone?: string; // IANA, "Europe/London"
};

// EXAMPLE ONLY: every request is the same fixed player. Your game looks
// the player up in its own signed-in session (a cookie, the app's token).
function playerOf(_req: IncomingMessage): Player | undefined {
  return {
    client_reference_id: "player-42", first_name: "Ada", last_name: "Lovelace",
    language: "en", currency: "GBP", country: "GB", timezone: "Europe/London",
  };
}

// The service's error body is {"error": ApiError}.
type ApiError = { code: string; message: string; fields?: { field: string; message: string }[] };

// A 503 is retried after its Retry-After, twice at most, then shown.
const maxAttempts = 3;

async function authorize(req: IncomingMessage, res: ServerResponse): Promise<void> {
  // 1. Decode. searchParams percent-decodes redirect_uri once; this decoded
  // value is the one registered and the one redirected to.
  const q = new URL(req.url ?? "/", "http://game.invalid").searchParams;
  const redirectUri = q.get("redirect_uri") ?? "";
  const state = q.get("state") ?? "";
  if (q.get("store_id") !== storeId) {
    return showError(res, 400, { code: "wrong_store", message: "This sign-in link is for another store." });
  }
  const player = playerOf(req);
  if (!player) {
    return showError(res, 401, { code: "not_signed_in", message: "Sign in to the game first, then open the link again." });
  }

  // 2. Generate: 32 random bytes, base64url without padding (43 characters).
  const code = randomBytes(32).toString("base64url");

  // 3. Register the code with the deep link's values, passed through unchanged.
  const body = JSON.stringify({
    auth_code: code, redirect_uri: redirectUri, code_challenge: q.get("code_challenge") ?? "", state, ...player,
  });
  const failure = await register(body);
  if (failure) {
    return showError(res, 502, failure); // on failure: show the error, never redirect
  }

  // 4. Only now send the browser back, to the same decoded redirect_uri.
  const sep = redirectUri.includes("?") ? "&" : "?";
  res.writeHead(302, {
    Location: `${redirectUri}${sep}code=${encodeURIComponent(code)}&state=${encodeURIComponent(state)}`,
    "Cache-Control": "no-store",
  });
  res.end();
}

// register posts the registration, retrying a 503 after its Retry-After;
// any other failure, a 4xx above all, is returned at once.
async function register(body: string): Promise<ApiError | undefined> {
  for (let attempt = 1; ; attempt++) {
    let resp: Response;
    try {
      resp = await fetch(`${apiBase}/stores/${encodeURIComponent(storeId)}/auth/auth-code`, {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-API-Key": apiKey },
        body,
        signal: AbortSignal.timeout(10_000),
      });
    } catch (err) {
      console.error("registering an auth code:", err);
      return { code: "unreachable", message: "The sign-in service could not be reached. Try again in a moment." };
    }
    if (resp.status === 200) return undefined;
    const out = (await resp.json().catch(() => ({}))) as { error?: ApiError };
    // Not the service's error shape (a proxy's page, say): the status alone.
    const error = out.error ?? { code: `http_${resp.status}`, message: resp.statusText };
    if (resp.status !== 503 || attempt === maxAttempts) return error;
    await new Promise((done) => setTimeout(done, retryAfterMs(resp.headers.get("Retry-After"))));
  }
}

// retryAfterMs reads Retry-After's seconds form, kept within 1 to 5 s: a
// player is waiting.
function retryAfterMs(v: string | null): number {
  const s = Number.parseInt(v ?? "", 10);
  return Math.min(Math.max(Number.isNaN(s) ? 1 : s, 1), 5) * 1000;
}

// showError answers the in-app page that says why sign-in failed: the
// service's error code and message, and each invalid field.
function showError(res: ServerResponse, status: number, e: ApiError): void {
  const fields = (e.fields ?? []).map((f) => `<li><code>${esc(f.field)}</code>: ${esc(f.message)}</li>\n`).join("");
  res.writeHead(status, { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store" });
  res.end(`<!doctype html>
<meta charset="utf-8"><title>Sign-in failed</title>
<h1>Sign-in failed</h1>
<p>${esc(e.message)}</p>
<p>Error code: <code>${esc(e.code)}</code></p>
${fields ? `<ul>\n${fields}</ul>\n` : ""}`);
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const port = Number(process.env.PORT ?? 8090);
createServer((req, res) => {
  const path = new URL(req.url ?? "/", "http://game.invalid").pathname;
  if (req.method === "GET" && path === "/oauth/authorize") {
    authorize(req, res).catch((err) => {
      console.error(err);
      showError(res, 500, { code: "internal", message: "Something went wrong in the game." });
    });
  } else {
    res.writeHead(404, { "Content-Type": "text/plain" }).end("not found\n");
  }
}).listen(port, "127.0.0.1", () => { // behind your reverse proxy, which terminates HTTPS
  console.log(`game backend on http://127.0.0.1:${port}/oauth/authorize`);
});
