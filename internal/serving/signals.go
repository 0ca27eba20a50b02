package serving

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Signals catches SIGINT and SIGTERM from now on, for both servers'
// graceful stop, until release is called: one would otherwise kill the
// process before it wrote its state. The first signal ends ctx, as end
// does (a stop for another reason, such as a failed Serve); the next
// signal after that closes again. One channel takes both from the start,
// so that no second signal is lost, however soon after the first it
// comes.
func Signals() (ctx context.Context, end context.CancelFunc, again <-chan struct{}, release func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, end = context.WithCancel(context.Background())
	second, released := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-sigs:
			end()
		case <-ctx.Done():
		}
		select {
		case <-sigs:
			close(second)
		case <-released:
		}
	}()
	return ctx, end, second, func() {
		close(released)
		signal.Stop(sigs)
		end()
	}
}
