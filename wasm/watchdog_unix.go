//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// A call into the module that runs past its deadline is cut off at its
// next host call (callState.check). One that makes none (pure
// computation) cannot be stopped: wazero runs it as machine code that Go
// can neither preempt nor interrupt, and the next garbage collection,
// which waits for every goroutine to stop, then stops the whole host with
// it. Nothing inside the host can act then, so a second process, the
// watchdog, watches the calls' deadlines in memory they share and kills
// the host (SIGKILL) once a call is past its deadline by watchdogGrace.
// The platform restarts the host; nothing acknowledged is lost, since the
// store has it all.

// watchdogEnv marks the host's own binary, run as the watchdog.
const watchdogEnv = "DEEPLINK_EDGE_WATCHDOG"

// watchdogGrace is how far past its deadline a call may run before the
// watchdog kills the host: room for one that calls the host again soon
// to be cut off there instead.
const watchdogGrace = time.Second

// watchdog is the host's side: one deadline per slot, in unix
// nanoseconds (0: no call under way), in memory shared with the process.
type watchdog struct {
	slots []atomic.Int64
	proc  *os.Process
}

// startWatchdog starts the watchdog process for n slots.
func startWatchdog(n int) (*watchdog, error) {
	f, err := os.CreateTemp("", "deeplink-watchdog-*")
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	defer f.Close()
	os.Remove(f.Name()) // the two processes' descriptors keep it
	size := n * 8
	if err := f.Truncate(int64(size)); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", watchdogEnv, n))
	cmd.ExtraFiles = []*os.File{f} // descriptor 3
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return &watchdog{slots: unsafe.Slice((*atomic.Int64)(unsafe.Pointer(&mem[0])), n), proc: cmd.Process}, nil
}

// arm notes that slot runs a call due by deadline; disarm that it ended.
// Nil-safe: without a deadline there is no watchdog.
func (w *watchdog) arm(slot int, deadline time.Time) {
	if w != nil {
		w.slots[slot].Store(deadline.UnixNano())
	}
}

func (w *watchdog) disarm(slot int) {
	if w != nil {
		w.slots[slot].Store(0)
	}
}

// stop ends the watchdog process.
func (w *watchdog) stop() {
	if w != nil {
		w.proc.Kill()
		w.proc.Wait()
	}
}

// watchdogMain is the watchdog process: it checks the deadlines four
// times a second (a quarter of watchdogGrace: a runaway is killed within
// 1.25 s of its deadline), kills its parent past one, and ends when the
// parent does.
func watchdogMain(n int) int {
	// A terminal's ^C and a service manager's stop reach the host's whole
	// process group: the watchdog ends with the host, not before it.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	parent := os.Getppid()
	mem, err := syscall.Mmap(3, 0, n*8, syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "watchdog:", err)
		return 1
	}
	slots := unsafe.Slice((*atomic.Int64)(unsafe.Pointer(&mem[0])), n)
	for range time.Tick(watchdogGrace / 4) {
		if os.Getppid() != parent {
			return 0
		}
		now := time.Now()
		for i := range slots {
			d := slots[i].Load()
			if d == 0 || now.Before(time.Unix(0, d).Add(watchdogGrace)) {
				continue
			}
			line, _ := json.Marshal(map[string]any{"time": now, "level": "ERROR",
				"msg":  "edge watchdog: a call ran past its deadline without calling the host; killing the host, for its supervisor to restart it (nothing acknowledged is lost)",
				"slot": i, "deadline": time.Unix(0, d)})
			os.Stderr.Write(append(line, '\n'))
			syscall.Kill(parent, syscall.SIGKILL)
			return 0
		}
	}
	return 0
}
