package webhook

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
)

// counters are what /metrics counts of webhooks: attempts by outcome, and
// deliveries by how they ended, attempted or not.
type counters struct {
	Attempts struct{ Succeeded, Failed, Retried atomic.Int64 }
	Ended    struct{ Succeeded, Failed atomic.Int64 }
}

// WriteMetrics writes the webhook metrics of docs/operations.md, in
// Prometheus's text format: the attempts this process made and the
// deliveries it ended, by outcome, and the deliveries of the stores
// configured waiting or under way (-1 when the store does not answer).
func (hk *Hooks) WriteMetrics(w io.Writer) {
	depth, err := hk.QueueDepth(context.Background())
	if err != nil {
		depth = -1 // the store does not answer: no figure
	}
	fmt.Fprint(w, "# HELP deeplink_webhook_attempts_total Webhook delivery attempts by outcome: succeeded, failed (the last attempt of a delivery that failed), retried.\n# TYPE deeplink_webhook_attempts_total counter\n")
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"succeeded\"} %d\n", hk.counts.Attempts.Succeeded.Load())
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"failed\"} %d\n", hk.counts.Attempts.Failed.Load())
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"retried\"} %d\n", hk.counts.Attempts.Retried.Load())
	fmt.Fprint(w, "# HELP deeplink_webhook_deliveries_total Webhook deliveries that ended, by outcome: succeeded, or failed (the retries used up, or given up when the endpoint was disabled or stopped taking the type).\n# TYPE deeplink_webhook_deliveries_total counter\n")
	fmt.Fprintf(w, "deeplink_webhook_deliveries_total{outcome=\"succeeded\"} %d\n", hk.counts.Ended.Succeeded.Load())
	fmt.Fprintf(w, "deeplink_webhook_deliveries_total{outcome=\"failed\"} %d\n", hk.counts.Ended.Failed.Load())
	fmt.Fprintf(w, "# HELP deeplink_webhook_queue_depth Webhook deliveries waiting to be sent or under way.\n# TYPE deeplink_webhook_queue_depth gauge\ndeeplink_webhook_queue_depth %d\n", depth)
}
