package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sign returns the signature headers of one attempt to deliver body (the
// exact bytes sent) of event id at unix time t, signed with the secret cur
// and, when old is not empty, the previous secret during its rotation
// grace. Each attempt is signed afresh with its own time; id stays the
// same across retries. Signers are cached per (cur, old) pair, so repeated
// attempts cost only the strings. A secret that is not whsec_+base64
// (never made by NewSecret) still gets an X-Webhook-Signature; its
// Standard Webhooks key is then empty.
func Sign(cur, old, id string, t int64, body []byte) Headers {
	return cachedSigner(cur, old).sign(id, time.Unix(t, 0), body)
}

// signer signs deliveries for one endpoint: its current secret and, during a
// rotation grace, the previous one. It is safe for concurrent use and cheap
// per call (the HMAC states are pooled).
type signer struct {
	cur, old *secretKeys // old is nil outside a rotation grace
	pool     sync.Pool   // of *signState
}

// signState is the per-call scratch space: one HMAC per key and buffers, so
// that a call allocates only the header strings it returns.
type signState struct {
	curWhole, curStd, oldWhole, oldStd hash.Hash
	msg, out                           []byte // signed prefix; header being built
	sum                                [sha256.Size]byte
}

// newSigner returns a signer for the keys cur and, when old is not nil,
// also for old.
func newSigner(cur, old *secretKeys) *signer {
	s := &signer{cur: cur, old: old}
	s.pool.New = func() any {
		st := &signState{
			curWhole: hmac.New(sha256.New, s.cur.whole),
			curStd:   hmac.New(sha256.New, s.cur.std),
			msg:      make([]byte, 0, 128),
			out:      make([]byte, 0, 256),
		}
		if s.old != nil {
			st.oldWhole = hmac.New(sha256.New, s.old.whole)
			st.oldStd = hmac.New(sha256.New, s.old.std)
		}
		return st
	}
	return s
}

// signerCache maps a (cur, old) secret pair to its *signer. Entries hold
// secrets the service keeps in memory anyway; the cache is dropped whole when
// it grows past maxCachedSigners (rotations, deleted endpoints).
var (
	signerCache     sync.Map // signerCacheKey → *signer
	signerCacheSize atomic.Int64
)

type signerCacheKey struct{ cur, old string }

const maxCachedSigners = 4096

func cachedSigner(cur, old string) *signer {
	k := signerCacheKey{cur, old}
	if s, ok := signerCache.Load(k); ok {
		return s.(*signer)
	}
	c := lenientKeys(cur)
	if c == nil {
		c = &secretKeys{} // no secret at all: a useless signature, not a panic
	}
	s := newSigner(c, lenientKeys(old))
	if signerCacheSize.Add(1) > maxCachedSigners {
		signerCache.Clear()
		signerCacheSize.Store(1)
	}
	if prev, loaded := signerCache.LoadOrStore(k, s); loaded {
		return prev.(*signer)
	}
	return s
}

// sign is Sign with s's keys, at t truncated to whole unix seconds.
func (s *signer) sign(id string, t time.Time, body []byte) Headers {
	st := s.pool.Get().(*signState)
	defer s.pool.Put(st)

	// X-Webhook-Signature: t=<ts>,v1=<hex>[,v1=<hex>], signing "<ts>.<body>".
	msg := strconv.AppendInt(st.msg[:0], t.Unix(), 10)
	tsLen := len(msg)
	msg = append(msg, '.')
	out := append(st.out[:0], "t="...)
	out = append(out, msg[:tsLen]...)
	out = append(out, ",v1="...)
	out = hex.AppendEncode(out, st.mac(st.curWhole, msg, body))
	if st.oldWhole != nil {
		out = append(out, ",v1="...)
		out = hex.AppendEncode(out, st.mac(st.oldWhole, msg, body))
	}
	sig := string(out)
	ts := sig[2 : 2+tsLen] // shares sig's memory: no allocation

	// webhook-signature: v1,<base64>[ v1,<base64>], signing "<id>.<ts>.<body>".
	msg = append(msg[:0], id...)
	msg = append(msg, '.')
	msg = append(msg, ts...)
	msg = append(msg, '.')
	out = append(out[:0], "v1,"...)
	out = base64.StdEncoding.AppendEncode(out, st.mac(st.curStd, msg, body))
	if st.oldStd != nil {
		out = append(out, " v1,"...)
		out = base64.StdEncoding.AppendEncode(out, st.mac(st.oldStd, msg, body))
	}
	stdSig := string(out)

	st.msg, st.out = msg[:0], out[:0] // keep grown buffers for the next call
	return Headers{Signature: sig, ID: id, Timestamp: ts, StdSignature: stdSig}
}

// mac returns HMAC(prefix || body) under h, in a buffer valid until the next
// call.
func (st *signState) mac(h hash.Hash, prefix, body []byte) []byte {
	h.Reset()
	h.Write(prefix)
	h.Write(body)
	return h.Sum(st.sum[:0])
}
