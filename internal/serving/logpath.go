package serving

import "strings"

// A request's path is not logged as it came: a client that puts a key
// where the store id goes (/stores/ak_live_…/webhooks), or a code in a
// path by mistake, would have it written to the log verbatim. A log line
// shows the path as the route it matched spells it, with only the
// segments known to be harmless in clear.

// Redacted stands for a path segment a log line does not show.
const Redacted = "…"

// routeWords are the fixed segments of the service's routes: shown as
// they are in the path of a request no route matched. A word missing here
// is only shown as Redacted.
var routeWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`stores auth auth-code token me link callback webhooks
		secret rotate-secret test deliveries retry recover events .well-known
		apple-app-site-association assetlinks.json healthz readyz metrics dashboard settings
		check sign-in sign-out static demo game authorize cart`) {
		routeWords[w] = true
	}
}

// LoggedPath is the path p of a request (decoded, without its query) as
// its log line shows it. pattern is the path of the route it matched
// ("/stores/{store_id}/webhooks", without the method), or "" when none
// did. A matched request shows pattern, its {store_id} replaced by the
// request's segment when isStore says it is a configured store; every
// other wildcard stays as the pattern names it. An unmatched one shows
// p with each segment that is not a route's fixed word nor, by isStore,
// a configured store id as Redacted. isStore may be nil: no segment is a
// store. The result is cut as CutPath cuts.
func LoggedPath(p, pattern string, isStore func(string) bool) string {
	if pattern == "/{$}" {
		return "/"
	}
	var b strings.Builder
	b.Grow(len(pattern) + 36)
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if pattern != "" {
		for i, ps := range strings.Split(strings.TrimPrefix(pattern, "/"), "/") {
			b.WriteByte('/')
			if ps == "{store_id}" && i < len(segs) && isStore != nil && isStore(segs[i]) {
				b.WriteString(segs[i])
			} else {
				b.WriteString(ps)
			}
		}
		return CutPath(b.String())
	}
	for _, seg := range segs {
		b.WriteByte('/')
		if seg == "" || routeWords[seg] || isStore != nil && isStore(seg) {
			b.WriteString(seg)
		} else {
			b.WriteString(Redacted)
		}
	}
	return CutPath(b.String())
}
