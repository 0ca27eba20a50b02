//go:build !wasip1

// Package redistest runs a redis-server of a test's own: on a free
// loopback port, its files in the test's temporary directory, killed when
// the test ends. Tests that need one call New, which skips the test when
// redis-server is not installed (./test.sh installs it).
package redistest

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

// Server is one redis-server.
type Server struct {
	Dir   string        // its working directory: its log and persistence files
	Port  int           // on 127.0.0.1
	Admin *redis.Client // the test's own client, for what a store does not do

	args []string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
}

// Persistent is Redis set up as the Redis store promises durability on:
// every change in the append-only file and fsynced before it is answered.
var Persistent = []string{"--appendonly", "yes", "--appendfsync", "always"}

// New starts a redis-server with args added to the package's own (no RDB
// snapshots, a log file in Dir), or skips the test when there is none.
func New(tb testing.TB, args ...string) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server not installed; ./test.sh installs it (Debian package redis-server)")
	}
	sv := &Server{Dir: tb.TempDir(), args: args}
	// The port is free when it is picked, not necessarily when Redis
	// binds it: another process may take it in between.
	var err error
	for range 3 {
		if sv.Port, err = freePort(); err != nil {
			tb.Fatal(err)
		}
		if err = sv.Start(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	sv.Admin = redis.NewClient(&redis.Options{Addr: sv.Addr()})
	tb.Cleanup(func() {
		sv.Admin.Close()
		sv.Kill()
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

// Addr is the server's HOST:PORT.
func (sv *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(sv.Port)) }

// URL is the server's database 0 as a redis:// URL.
func (sv *Server) URL() string { return "redis://" + sv.Addr() + "/0" }

// Pid is the process id of the server running now.
func (sv *Server) Pid() int { return sv.cmd.Process.Pid }

// Start runs redis-server on sv.Port and sv.Dir (New does; a test calls
// it again after Stop) and waits until it answers PING, or fails when it
// does not within 10 s.
func (sv *Server) Start() error {
	args := append([]string{
		"--port", strconv.Itoa(sv.Port), "--bind", "127.0.0.1",
		"--dir", sv.Dir, "--logfile", "redis.log", "--save", "",
	}, sv.args...)
	cmd := exec.Command("redis-server", args...)
	cmd.Dir = sv.Dir
	if err := cmd.Start(); err != nil {
		return err
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); close(exit) }()
	sv.cmd, sv.exit = cmd, exit
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pong(sv.Addr()) {
			return nil
		}
		select {
		case <-exit:
			return fmt.Errorf("redis-server exited at start: %s", sv.LogTail())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			sv.Kill()
			return fmt.Errorf("redis-server did not answer PING within 10 s: %s", sv.LogTail())
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

// LogTail is the end of the server's log, for a failure's message.
func (sv *Server) LogTail() string {
	b, _ := os.ReadFile(sv.Dir + "/redis.log")
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop sends sig (SIGKILL: a crash; SIGTERM: Redis's own shutdown, which
// fsyncs what it holds) and waits for the server to exit.
func (sv *Server) Stop(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	sv.cmd.Process.Signal(sig)
	select {
	case <-sv.exit:
	case <-time.After(30 * time.Second):
		tb.Fatalf("redis-server still running 30 s after %v", sig)
	}
}

// Restart stops the server with sig and starts it again on the same
// port and files.
func (sv *Server) Restart(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	sv.Stop(tb, sig)
	if err := sv.Start(); err != nil {
		tb.Fatal(err)
	}
}

// Signal sends sig to the server without waiting (SIGSTOP, SIGCONT).
func (sv *Server) Signal(sig syscall.Signal) { sv.cmd.Process.Signal(sig) }

// Kill ends the server, stopped or not, and waits for it.
func (sv *Server) Kill() {
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

// Advance makes d pass for the keys under prefix (which holds no glob
// characters): Redis's own clock cannot be set.
func (sv *Server) Advance(tb testing.TB, prefix string, d time.Duration) {
	tb.Helper()
	if err := advanceScript.Run(tb.Context(), sv.Admin, nil, prefix+"*", d.Milliseconds()).Err(); err != nil {
		tb.Fatalf("advancing the keys under %q by %v: %v", prefix, d, err)
	}
}
