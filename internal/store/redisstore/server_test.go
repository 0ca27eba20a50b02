//go:build !wasip1

package redisstore

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a redis-server of the test's own: on a free loopback port,
// its files in a temporary directory, killed when the test ends.
type server struct {
	dir   string
	port  int
	args  []string
	cmd   *exec.Cmd
	exit  chan struct{} // closed when cmd has exited
	admin *redis.Client // the test's own client, for what a store does not do
}

// persistent is Redis set up as the backend promises durability on:
// every change in the append-only file and fsynced before it is answered.
var persistent = []string{"--appendonly", "yes", "--appendfsync", "always"}

// startServer starts a redis-server with args added to the test's own,
// or skips the test when there is none.
func startServer(tb testing.TB, args ...string) *server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed; ./test.sh installs it")
	}
	sv := &server{dir: tb.TempDir(), args: args}
	// The port is free when it is picked, not necessarily when Redis
	// binds it: another process may take it in between.
	var err error
	for range 3 {
		if sv.port, err = freePort(); err != nil {
			tb.Fatal(err)
		}
		if err = sv.start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	sv.admin = redis.NewClient(&redis.Options{Addr: sv.addr()})
	tb.Cleanup(func() {
		sv.admin.Close()
		sv.kill()
	})
	return sv
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (sv *server) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(sv.port)) }
func (sv *server) url() string  { return "redis://" + sv.addr() + "/0" }

// start runs redis-server on sv.port and sv.dir and waits until it
// answers PING, or fails when it does not within 10 s.
func (sv *server) start() error {
	args := append([]string{
		"--port", strconv.Itoa(sv.port), "--bind", "127.0.0.1",
		"--dir", sv.dir, "--logfile", "redis.log", "--save", "",
	}, sv.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = sv.dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); close(exit) }()
	sv.cmd, sv.exit = cmd, exit
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pong(sv.addr()) {
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", sv.logTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			sv.kill()
			return fmt.Errorf("redis-server did not answer PING within 10 s: %s", sv.logTail())
		}
	}
}

// pong reports whether a Redis at addr answers PING now.
func pong(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}

func (sv *server) logTail() string {
	b, _ := os.ReadFile(sv.dir + "/redis.log")
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop sends sig (SIGKILL: a crash; SIGTERM: Redis's own shutdown, which
// fsyncs what it holds) and waits for the server to exit.
func (sv *server) stop(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	sv.cmd.Process.Signal(sig)
	select {
	case <-sv.exit:
	case <-time.After(30 * time.Second):
		tb.Fatalf("redis-server still running 30 s after %v", sig)
	}
}

// restart stops the server with sig and starts it again on the same
// port and files.
func (sv *server) restart(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	sv.stop(tb, sig)
	if err := sv.start(); err != nil {
		tb.Fatal(err)
	}
}

// signal sends sig to the server without waiting (SIGSTOP, SIGCONT).
func (sv *server) signal(sig syscall.Signal) { sv.cmd.Process.Signal(sig) }

func (sv *server) kill() {
	if sv.cmd != nil {
		sv.cmd.Process.Kill() // a stopped process dies of SIGKILL too
		<-sv.exit
	}
}

// advanceScript makes time pass for the keys matching ARGV[1]: each TTL
// is cut by ARGV[2] ms, and a key whose TTL that uses up is deleted, as
// Redis would have expired it.
var advanceScript = redis.NewScript(`
local d = tonumber(ARGV[2])
for _, k in ipairs(redis.call('KEYS', ARGV[1])) do
  local left = redis.call('PTTL', k)
  if left >= 0 then
    if left <= d then redis.call('DEL', k) else redis.call('PEXPIRE', k, left - d) end
  end
end
return 0
`)

// advance makes d pass for the keys under prefix (which holds no glob
// characters).
func (sv *server) advance(tb testing.TB, prefix string, d time.Duration) {
	tb.Helper()
	if err := advanceScript.Run(tb.Context(), sv.admin, nil, prefix+"*", d.Milliseconds()).Err(); err != nil {
		tb.Fatalf("advancing the keys under %q by %v: %v", prefix, d, err)
	}
}
