package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"html/template"
	"net/http"
)

// authPage is a page of the browser flow for the player (web/auth): what
// happened, in plain words, and the way back to the shop.
type authPage struct {
	Title, Message string
	Code           string // the machine's word for it, in small print; "" for none
	Back           string // where "Back to the shop" leads: a path on the shop's site
	Off            bool   // nothing went wrong: the player cancelled, or sign-in is off
}

var authPages = template.Must(template.ParseFS(webFiles, "web/auth/*.html"))

// authPageCSP allows the page nothing but its own inline style sheet, by
// its hash: no script, no other origin, no framing.
var authPageCSP = func() string {
	page, err := webFiles.ReadFile("web/auth/page.html")
	if err != nil {
		panic(err) // embedded: present in every build
	}
	_, css, _ := bytes.Cut(page, []byte("<style>"))
	css, _, found := bytes.Cut(css, []byte("</style>"))
	if !found {
		panic("web/auth/page.html has no <style> element")
	}
	sum := sha256.Sum256(css)
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
}()

// writeAuthPage answers with p as an HTML page, with status.
func writeAuthPage(w http.ResponseWriter, status int, p authPage) {
	var b bytes.Buffer
	if err := authPages.ExecuteTemplate(&b, "page.html", p); err != nil {
		panic(err) // a template of the binary's own, with data of fixed types
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", authPageCSP)
	h.Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}
