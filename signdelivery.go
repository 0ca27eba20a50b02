package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
)

// TEMPORARY until signer.go lands: the signatures of one attempt.
func signDelivery(cur, old, id string, t int64, body []byte) (sig, stdSig string) {
	ts := strconv.FormatInt(t, 10)
	sig = "t=" + ts
	for _, s := range []string{cur, old} {
		if s == "" {
			continue
		}
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte(ts + "."))
		m.Write(body)
		sig += ",v1=" + hex.EncodeToString(m.Sum(nil))
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		m = hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		if stdSig != "" {
			stdSig += " "
		}
		stdSig += "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	return sig, stdSig
}

func newSecret() string {
	var b [32]byte
	rand.Read(b[:])
	return "whsec_" + base64.StdEncoding.EncodeToString(b[:])
}
