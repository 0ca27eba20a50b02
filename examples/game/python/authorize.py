"""The game side of deep-link sign-in, standard library only (http.server and
urllib): the handler the webshop's deep link opens (the store's Game
Authorize URL, here /oauth/authorize). It registers a one-time code for the
game's signed-in player with the deeplink service and sends the browser back
to the webshop with it, or, when the service refuses, shows why and sends
the browser nowhere.

Run it with Python 3.9+:
    DEEPLINK_API_BASE=https://deeplink.example.com DEEPLINK_STORE_ID=... DEEPLINK_API_KEY=... \\
      PORT=8090 python3 authorize.py
"""
import html
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API_BASE = os.environ.get("DEEPLINK_API_BASE", "")  # the deeplink service
STORE_ID = os.environ.get("DEEPLINK_STORE_ID", "")  # your store's id
API_KEY = os.environ.get("DEEPLINK_API_KEY", "")  # a secret: keep it on the server

# A 503 is retried after its Retry-After, twice at most, then shown.
MAX_ATTEMPTS = 3


def player_of(request):
    """Who is signed in to the game: the fields of the registration body (the
    service's API reference, "Register an auth code"); client_reference_id is
    required, the others may be left out. None when nobody is signed in.

    EXAMPLE ONLY: every request is the same fixed player. Your game looks the
    player up in its own signed-in session (a cookie, the app's token)."""
    return {
        "client_reference_id": "player-42", "first_name": "Ada", "last_name": "Lovelace",
        "language": "en", "currency": "GBP", "country": "GB", "timezone": "Europe/London",
    }


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/oauth/authorize":
            return self.send_error(404)
        # 1. Decode. parse_qs percent-decodes redirect_uri once; this decoded
        # value is the one registered and the one redirected to.
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        redirect_uri, state = q.get("redirect_uri", ""), q.get("state", "")
        if q.get("store_id") != STORE_ID:
            return self.show_error(400, {"code": "wrong_store", "message": "This sign-in link is for another store."})
        player = player_of(self)
        if player is None:
            return self.show_error(401, {"code": "not_signed_in", "message": "Sign in to the game first, then open the link again."})

        # 2. Generate: 32 random bytes, base64url without padding (43 characters).
        code = secrets.token_urlsafe(32)

        # 3. Register the code with the deep link's values, passed through unchanged.
        body = {"auth_code": code, "redirect_uri": redirect_uri,
                "code_challenge": q.get("code_challenge", ""), "state": state, **player}
        failure = register(json.dumps(body).encode())
        if failure:
            return self.show_error(502, failure)  # on failure: show the error, never redirect

        # 4. Only now send the browser back, to the same decoded redirect_uri.
        sep = "&" if "?" in redirect_uri else "?"
        self.send_response(302)
        self.send_header("Location", redirect_uri + sep + urllib.parse.urlencode({"code": code, "state": state}))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def show_error(self, status, error):
        """The in-app page that says why sign-in failed: the service's error
        code and message, and each invalid field."""
        e = lambda s: html.escape(str(s))
        page = ("<!doctype html>\n<meta charset=\"utf-8\"><title>Sign-in failed</title>\n<h1>Sign-in failed</h1>\n"
                f"<p>{e(error.get('message', ''))}</p>\n<p>Error code: <code>{e(error.get('code', ''))}</code></p>\n")
        fields = error.get("fields") or []
        if fields:
            page += "<ul>\n" + "".join(f"<li><code>{e(f['field'])}</code>: {e(f['message'])}</li>\n" for f in fields) + "</ul>\n"
        data = page.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def register(body):
    """Posts the registration, retrying a 503 after its Retry-After; any other
    failure, a 4xx above all, is returned at once. None on success."""
    url = f"{API_BASE}/stores/{urllib.parse.quote(STORE_ID, safe='')}/auth/auth-code"
    for attempt in range(1, MAX_ATTEMPTS + 1):
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "X-API-Key": API_KEY})
        try:
            with urllib.request.urlopen(req, timeout=10):
                return None  # 200: registered
        except urllib.error.HTTPError as resp:  # a status other than 2xx
            try:
                error = json.load(resp)["error"]
            except (ValueError, KeyError, TypeError):  # not the service's error shape (a proxy's page, say)
                error = {"code": f"http_{resp.code}", "message": resp.reason}
            if resp.code != 503 or attempt == MAX_ATTEMPTS:
                return error
            time.sleep(retry_after(resp.headers.get("Retry-After")))
        except OSError as err:  # refused, timed out, DNS
            print("registering an auth code:", err, file=sys.stderr)
            return {"code": "unreachable", "message": "The sign-in service could not be reached. Try again in a moment."}


def retry_after(value):
    """Retry-After's seconds form, kept within 1 to 5 s: a player is waiting."""
    try:
        seconds = int(value)
    except (TypeError, ValueError):
        seconds = 1
    return min(max(seconds, 1), 5)


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8090"))
    print(f"game backend on http://127.0.0.1:{port}/oauth/authorize", flush=True)
    # Behind your reverse proxy, which terminates HTTPS.
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
