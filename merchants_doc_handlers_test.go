package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"deeplink/internal/signature"
	"deeplink/internal/webhook"
)

// codeBlock returns the n-th (from 0) ```lang fenced block of the
// markdown doc.
func codeBlock(t *testing.T, doc, lang string, n int) string {
	t.Helper()
	rest := doc
	for i := 0; ; i++ {
		var ok bool
		_, rest, ok = strings.Cut(rest, "\n```"+lang+"\n")
		if !ok {
			t.Fatalf("docs/receiving-webhooks.md has no ```%s block #%d", lang, n+1)
		}
		if i == n {
			break
		}
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("unterminated ```%s block", lang)
	}
	return block + "\n"
}

// TestMerchantDocHandlers runs the receiving handlers of the merchants'
// guide (docs/receiving-webhooks.md) whole, as a merchant pastes them, in
// their frameworks (net/http, Express, Flask, PHP's own server; test.sh
// installs Express and Flask): a delivery signed now is 200, a changed
// body, a wrong secret and a signature ten minutes old are 400.
func TestMerchantDocHandlers(t *testing.T) {
	t.Parallel() // processes of its own, mostly waiting on them: beside the others
	b, err := os.ReadFile("docs/receiving-webhooks.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	const goMain = `
func main() {
	http.HandleFunc("/webhooks", handleWebhook)
	http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), nil)
}
`
	const flaskRun = `
app.run(host="127.0.0.1", port=int(os.environ["PORT"]))
`
	tests := []struct {
		lang, file, program string
		cmd                 []string // run in the program's directory; PORT is set
		module              string   // a module the program imports, which test.sh installs
	}{
		{"go", "main.go", "package main\n\n" + codeBlock(t, doc, "go", 0) + goMain, []string{"go", "build", "-o", "server", "main.go", "&&", "./server"}, ""},
		{"js", "server.js", codeBlock(t, doc, "js", 0) + codeBlock(t, doc, "js", 1), []string{"node", "server.js"}, "express"},
		{"python", "app.py", codeBlock(t, doc, "python", 0) + codeBlock(t, doc, "python", 1) + flaskRun, []string{"python3", "app.py"}, "flask"},
		{"php", "receive.php", codeBlock(t, doc, "php", 0) + codeBlock(t, doc, "php", 1), []string{"php", "-S", "127.0.0.1:$PORT", "receive.php"}, ""},
	}
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	body := []byte(`{"id":"evt_1","type":"order.status.updated","created_at":1735689600,"data":{"object":{"id":"ord_1","status":"completed"}}}`)
	for _, tc := range tests {
		t.Run(tc.lang, func(t *testing.T) {
			t.Parallel()
			needTool(t, tc.cmd[0])
			if tc.module != "" {
				needModule(t, tc.lang, tc.module)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.program), 0o600); err != nil {
				t.Fatal(err)
			}
			addr, err := ctFreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := net.SplitHostPort(addr)
			args := make([]string, len(tc.cmd))
			for i, a := range tc.cmd {
				args[i] = strings.ReplaceAll(a, "$PORT", port)
			}
			if i := slices.Index(args, "&&"); i >= 0 { // a build first
				build := exec.Command(args[0], args[1:i]...)
				build.Dir = dir
				build.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=on")
				if out, err := build.CombinedOutput(); err != nil {
					t.Fatalf("%q: %v\n%s", args[:i], err, out)
				}
				args = args[i+1:]
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "PORT="+port, "WEBHOOK_SECRET="+secret, "GOFLAGS=", "GO111MODULE=on")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			cmd.WaitDelay = 5 * time.Second // a child it left holding the output
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			url := "http://" + addr + "/webhooks"
			// post sends sent, with a signature of signed by secret at at.
			post := func(secret string, at time.Time, signed, sent []byte) int {
				sig := signature.Sign(secret, "", "evt_1", at.Unix(), signed)
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(sent))
				if err != nil {
					t.Fatal(err)
				}
				req.Header = webhook.DeliveryHeader(sig)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0
				}
				resp.Body.Close()
				return resp.StatusCode
			}
			// Up when it answers; go run builds first, and an interpreter
			// starts in its own time.
			deadline := time.Now().Add(2 * time.Minute)
			for post(secret, time.Now(), body, body) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the %s handler did not answer within 2 minutes:\n%s", tc.lang, out.String())
				}
				time.Sleep(100 * time.Millisecond) // polling a process's port: nothing to wait on
			}
			tampered := bytes.Replace(body, []byte("completed"), []byte("refunded!"), 1)
			for _, c := range []struct {
				name   string
				secret string
				at     time.Time
				body   []byte
				want   int
			}{
				{"signed now", secret, time.Now(), body, 200},
				{"changed body", secret, time.Now(), tampered, 400},
				{"wrong secret", "whsec_" + strings.Repeat("A", 32), time.Now(), body, 400},
				{"ten minutes old", secret, time.Now().Add(-10 * time.Minute), body, 400},
			} {
				if got := post(c.secret, c.at, body, c.body); got != c.want {
					t.Errorf("the %s handler, %s: status %d; want %d\n%s", tc.lang, c.name, got, c.want, out.String())
				}
			}
		})
	}
}

// needModule skips the test (fails it under test.sh) when lang cannot
// load module: Express from NODE_PATH, Flask from python3's path.
func needModule(t *testing.T, lang, module string) {
	t.Helper()
	var check *exec.Cmd
	switch lang {
	case "js":
		check = exec.Command("node", "-e", "require("+mustJSONString(module)+")")
	case "python":
		check = exec.Command("python3", "-c", "import "+module)
	}
	if out, err := check.CombinedOutput(); err != nil {
		if os.Getenv(requireToolsEnv) == "require" {
			t.Fatalf("%s cannot load %s, and %s=require: ./test.sh installs it\n%s", lang, module, requireToolsEnv, out)
		}
		t.Skipf("skipped: %s cannot load %s (./test.sh installs it; %s=require makes this a failure)", lang, module, requireToolsEnv)
	}
}

func mustJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
