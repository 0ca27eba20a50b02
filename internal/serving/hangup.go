//go:build !wasip1

package serving

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// IgnoreHangups keeps SIGHUP from killing the process, which is its
// default: a logrotate postrotate or a closed terminal would otherwise
// stop the service without writing its state (and, the signal counting
// as a clean stop, systemd's Restart=on-failure would not start it
// again). There is nothing to reload, as the configuration is read at
// start-up and the log goes to standard error, so each one is only
// logged, through slog's default logger as it is when the signal comes.
func IgnoreHangups() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	go func() {
		for range c {
			slog.Warn("SIGHUP ignored: the configuration is read only at start-up (restart to apply a change), and the log goes to standard error (nothing to reopen)")
		}
	}()
}
