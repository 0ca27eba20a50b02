//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
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
// watchdog, watches the calls in memory they share and kills the host
// (SIGKILL) once a call has run longer than the deadline allows by
// watchdogGrace. The platform restarts the host; nothing acknowledged is
// lost, since the store has it all.
//
// The host writes which call each slot runs, not when it is due: the
// watchdog times each call on its own monotonic clock, so a step of the
// wall clock (NTP, a suspended VM) can neither kill a host that is fine
// nor spare a runaway.

// watchdogEnv marks the host's own binary, run as the watchdog: its
// value is "SLOTS,LIMIT", LIMIT a call's deadline as a Go duration.
const watchdogEnv = "DEEPLINK_EDGE_WATCHDOG"

// watchdogGrace is how long past its deadline a call may run before the
// watchdog kills the host: room for one that calls the host again soon
// to be cut off there instead.
const watchdogGrace = time.Second

// watchdog is the host's side: per slot, the id of the call it runs (0:
// none), negated while the call is in a host function, in memory shared
// with the process.
type watchdog struct {
	slots []atomic.Int64
	ids   atomic.Int64 // the last id given
	proc  *os.Process
}

// startWatchdog starts the watchdog process for n slots whose calls are
// due within limit.
func startWatchdog(n int, limit time.Duration) (*watchdog, error) {
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
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%s", watchdogEnv, n, limit))
	cmd.ExtraFiles = []*os.File{f} // descriptor 3
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("watchdog: %w", err)
	}
	return &watchdog{slots: unsafe.Slice((*atomic.Int64)(unsafe.Pointer(&mem[0])), n), proc: cmd.Process}, nil
}

// arm notes that slot runs a new call and returns its id; inHost that
// call id is in a host function (the watchdog leaves it be, but times
// it), back that it runs in the module again, and disarm that it has
// ended. Nil-safe: without a deadline there is no watchdog.
func (w *watchdog) arm(slot int) int64 {
	if w == nil {
		return 0
	}
	id := w.ids.Add(1)
	w.slots[slot].Store(id)
	return id
}

func (w *watchdog) inHost(slot int, id int64) {
	if w != nil {
		w.slots[slot].Store(-id)
	}
}

func (w *watchdog) back(slot int, id int64) {
	if w != nil {
		w.slots[slot].Store(id)
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

// watchdogMain is the watchdog process, its argument watchdogEnv's value:
// it looks at the slots four times a second (a quarter of
// watchdogGrace: a runaway is killed within 1.5 s of its deadline, the time its calls spend in the host counted),
// kills its parent once a call has run past limit + watchdogGrace, and
// ends when the parent does.
func watchdogMain(arg string) int {
	var n int
	var limit time.Duration
	if slots, lim, ok := strings.Cut(arg, ","); ok {
		n, _ = strconv.Atoi(slots)
		limit, _ = time.ParseDuration(lim)
	}
	if n <= 0 || limit <= 0 {
		fmt.Fprintf(os.Stderr, "watchdog: %s=%q: want SLOTS,LIMIT\n", watchdogEnv, arg)
		return 2
	}
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
	seen := make([]watch, n)
	for range time.Tick(watchdogGrace / 4) {
		if os.Getppid() != parent {
			return 0
		}
		now := time.Now()
		for i := range slots {
			ran, overdue := seen[i].see(slots[i].Load(), now, limit)
			if !overdue {
				continue
			}
			line, _ := json.Marshal(map[string]any{"time": now, "level": "ERROR",
				"msg":  "edge watchdog: a call ran past its deadline without calling the host; killing the host, for its supervisor to restart it (nothing acknowledged is lost)",
				"slot": i, "ran": ran.Round(time.Millisecond).String(), "limit": limit.String()})
			os.Stderr.Write(append(line, '\n'))
			syscall.Kill(parent, syscall.SIGKILL)
			return 0
		}
	}
	return 0
}

// watch is what the watchdog knows of a slot: the last call seen there,
// and when it was first seen, in the module or in the host.
type watch struct {
	id    int64
	since time.Time // the watchdog's, with its monotonic reading
}

// see notes that the slot reads v at now (a call's id, negated while it
// is in the host; 0 for none), and returns how long the call seen there
// has run and whether it is in the module past limit + watchdogGrace.
func (w *watch) see(v int64, now time.Time, limit time.Duration) (ran time.Duration, overdue bool) {
	id := max(v, -v)
	switch {
	case id == 0:
		return 0, false
	case id != w.id:
		*w = watch{id, now}
		return 0, false
	}
	ran = now.Sub(w.since)
	return ran, v > 0 && ran >= limit+watchdogGrace
}
